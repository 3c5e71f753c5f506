// deepinfer-bench-kvstore-trace: replays a Mooncake request trace through the KV store and
// compares its input-token hit rate with simulations of the same trace: an ideal cache
// (unbounded, nothing ever expires), an LRU cache of the same capacity, and an ideal cache with
// the same sliding TTL. Token ids are synthesised from the trace's 512-token block ids (block h
// always yields the same 512 ids), so requests that share block ids share token prefixes; the
// store sees 128-token pages keyed by the engine's hash chain, with small payloads (hit rates
// do not depend on payload size; capacities are given in pages).
// Usage: deepinfer-bench-kvstore-trace --trace FILE.jsonl [--requests N] [--capacity-fraction 0.1]
//          [--ttl-s 300]
// Prints a table, then one JSON line.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <list>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cluster/request_trace.h"
#include "kvstore/kv_store.h"
#include "tool_flags.h"

namespace deepinfer::bench {
namespace {

constexpr const char* kUsage =
    "usage: deepinfer-bench-kvstore-trace --trace FILE.jsonl [--requests N] [--capacity-fraction 0.1]\n"
    "         [--ttl-s 300]\n"
    "Replays the trace through the KV store (host-memory tier) and prints its input-token hit rate\n"
    "beside an ideal cache, an LRU cache of the same capacity, and an ideal cache with the same TTL.\n";

constexpr int32_t kPageTokens = 128;
constexpr int32_t kTraceBlockTokens = 512;
constexpr size_t kPayloadBytes = 64;

// A trace request with prompt tokens made up from its block ids: requests sharing a leading run of
// ids share those tokens, so the engine's own chain hash finds the same prefixes.
struct ReplayedRequest {
  int64_t timestamp_ms = 0;
  std::vector<int32_t> tokens;
};

uint32_t mix32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

Result<std::vector<ReplayedRequest>> read_trace(const std::string& path, int64_t max_requests) {
  auto records = read_mooncake_trace(path, max_requests);
  if (!records.ok()) return Error{"--trace: " + records.error().message};
  std::vector<ReplayedRequest> requests;
  for (const TraceRequest& record : *records) {
    ReplayedRequest request;
    request.timestamp_ms = static_cast<int64_t>(record.timestamp_ms);
    for (const uint64_t block : record.block_hashes) {
      for (int32_t t = 0; t < kTraceBlockTokens && static_cast<int64_t>(request.tokens.size()) < record.input_tokens;
           ++t) {
        request.tokens.push_back(static_cast<int32_t>(mix32(block * 1000003u + t) % 150000));
      }
    }
    requests.push_back(std::move(request));
  }
  return requests;
}

// Chain hashes of the pages a request can reuse: full pages before its last token.
std::vector<BlockHash> page_hashes(const std::vector<int32_t>& tokens) {
  std::vector<BlockHash> hashes;
  BlockHash hash = prefix_root_hash("bench-model", "");
  const size_t num_pages = (tokens.size() - 1) / kPageTokens;
  for (size_t i = 0; i < num_pages; ++i) {
    hash = chain_block_hash(hash, tokens.data() + i * kPageTokens, kPageTokens, {});
    hashes.push_back(hash);
  }
  return hashes;
}

struct HitCount {
  int64_t hit_tokens = 0;
  int64_t input_tokens = 0;
  double rate() const { return input_tokens > 0 ? static_cast<double>(hit_tokens) / input_tokens : 0.0; }
};

// Unbounded cache; ttl_s > 0: a page expires ttl_s after its last use.
HitCount simulate_ideal(const std::vector<ReplayedRequest>& trace, int64_t ttl_s) {
  std::unordered_map<BlockHash, int64_t, BlockHashHasher> last_use_ms;
  HitCount count;
  for (const ReplayedRequest& r : trace) {
    const std::vector<BlockHash> hashes = page_hashes(r.tokens);
    size_t hits = 0;
    while (hits < hashes.size()) {
      const auto it = last_use_ms.find(hashes[hits]);
      if (it == last_use_ms.end() || (ttl_s > 0 && r.timestamp_ms - it->second >= ttl_s * 1000)) break;
      ++hits;
    }
    for (const BlockHash& h : hashes) last_use_ms[h] = r.timestamp_ms;
    count.hit_tokens += static_cast<int64_t>(hits) * kPageTokens;
    count.input_tokens += static_cast<int64_t>(r.tokens.size());
  }
  return count;
}

HitCount simulate_lru(const std::vector<ReplayedRequest>& trace, size_t capacity_pages) {
  std::list<BlockHash> order;  // most recent first
  std::unordered_map<BlockHash, std::list<BlockHash>::iterator, BlockHashHasher> where;
  HitCount count;
  for (const ReplayedRequest& r : trace) {
    const std::vector<BlockHash> hashes = page_hashes(r.tokens);
    size_t hits = 0;
    while (hits < hashes.size() && where.contains(hashes[hits])) ++hits;
    for (const BlockHash& h : hashes) {
      if (const auto it = where.find(h); it != where.end()) order.erase(it->second);
      order.push_front(h);
      where[h] = order.begin();
      if (where.size() > capacity_pages) {
        where.erase(order.back());
        order.pop_back();
      }
    }
    count.hit_tokens += static_cast<int64_t>(hits) * kPageTokens;
    count.input_tokens += static_cast<int64_t>(r.tokens.size());
  }
  return count;
}

// The real store (host tier; the disk tier runs the same retention code) on a trace clock.
Result<HitCount> replay_store(const std::vector<ReplayedRequest>& trace, int64_t capacity_pages, int64_t ttl_s) {
  int64_t now_ms = 0;
  KvStoreConfig config;
  config.host_bytes = capacity_pages * static_cast<int64_t>(page_image_bytes(kPageTokens, kPayloadBytes));
  config.backend = "disk";
  config.cost_guard = false;
  config.write_queue_pages = 1 << 20;
  config.write_queue_bytes = int64_t{1} << 40;
  config.retention.clock = [&] { return now_ms / 1000; };
  if (ttl_s > 0) config.retention.default_ttl_s = ttl_s;
  auto store = KvStore::open(config, "bench-model");
  if (!store.ok()) return store.error();
  HitCount count;
  const std::vector<uint8_t> payload(kPayloadBytes, 0x5a);
  for (const ReplayedRequest& r : trace) {
    now_ms = r.timestamp_ms;
    const std::vector<BlockHash> hashes = page_hashes(r.tokens);
    std::vector<PageRequest> pages;
    for (size_t i = 0; i < hashes.size(); ++i) {
      const auto begin = r.tokens.begin() + static_cast<ptrdiff_t>(i * kPageTokens);
      pages.push_back(PageRequest{hashes[i], static_cast<int32_t>(i), std::vector<int32_t>(begin, begin + kPageTokens)});
    }
    const size_t hits = (*store)->load_chain(pages, kPayloadBytes, 1.0).size();
    for (size_t i = hits; i < pages.size(); ++i) {
      (*store)->enqueue_write(PageWrite{pages[i].hash, pages[i].page_index, pages[i].token_ids, payload,
                                        TrafficClass::kDefault, nullptr});
    }
    (*store)->flush();
    count.hit_tokens += static_cast<int64_t>(hits) * kPageTokens;
    count.input_tokens += static_cast<int64_t>(r.tokens.size());
  }
  return count;
}

Result<void> run(int argc, char** argv) {
  auto flags = parse_tool_flags(argc, argv, {"--trace", "--requests", "--capacity-fraction", "--ttl-s"});
  if (!flags.ok()) return flags.error();
  if (!flags->count("--trace")) return Error{"--trace FILE.jsonl is required"};
  const int64_t max_requests = flags->count("--requests") ? std::stoll(flags->at("--requests")) : 0;
  const double fraction = flags->count("--capacity-fraction") ? std::stod(flags->at("--capacity-fraction")) : 0.1;
  const int64_t ttl_s = flags->count("--ttl-s") ? std::stoll(flags->at("--ttl-s")) : 300;
  auto trace = read_trace(flags->at("--trace"), max_requests);
  if (!trace.ok()) return trace.error();
  std::unordered_set<BlockHash, BlockHashHasher> distinct;
  for (const ReplayedRequest& r : *trace) {
    for (const BlockHash& h : page_hashes(r.tokens)) distinct.insert(h);
  }
  const auto capacity = std::max<int64_t>(1, static_cast<int64_t>(fraction * static_cast<double>(distinct.size())));
  const HitCount ideal = simulate_ideal(*trace, 0);
  auto store_unbounded = replay_store(*trace, static_cast<int64_t>(distinct.size()) + 1, 0);
  if (!store_unbounded.ok()) return store_unbounded.error();
  const HitCount lru = simulate_lru(*trace, static_cast<size_t>(capacity));
  auto store_bounded = replay_store(*trace, capacity, 0);
  if (!store_bounded.ok()) return store_bounded.error();
  const HitCount ideal_ttl = simulate_ideal(*trace, ttl_s);
  auto store_ttl = replay_store(*trace, static_cast<int64_t>(distinct.size()) + 1, ttl_s);
  if (!store_ttl.ok()) return store_ttl.error();
  std::printf("trace: %zu requests, %zu distinct 128-token pages\n", trace->size(), distinct.size());
  std::printf("%-34s %10s %10s\n", "input-token hit rate", "store", "reference");
  std::printf("%-34s %9.2f%% %9.2f%%  (ideal: unbounded)\n", "unbounded, 72 h TTL", 100 * store_unbounded->rate(),
              100 * ideal.rate());
  std::printf("%-34s %9.2f%% %9.2f%%  (LRU, same capacity)\n",
              ("capacity " + std::to_string(capacity) + " pages").c_str(), 100 * store_bounded->rate(), 100 * lru.rate());
  std::printf("%-34s %9.2f%% %9.2f%%  (ideal with the same TTL)\n",
              ("sliding TTL " + std::to_string(ttl_s) + " s").c_str(), 100 * store_ttl->rate(), 100 * ideal_ttl.rate());
  nlohmann::json out = {{"requests", trace->size()},
                        {"distinct_pages", distinct.size()},
                        {"store_unbounded", store_unbounded->rate()},
                        {"ideal", ideal.rate()},
                        {"capacity_pages", capacity},
                        {"store_bounded", store_bounded->rate()},
                        {"lru_bounded", lru.rate()},
                        {"ttl_s", ttl_s},
                        {"store_ttl", store_ttl->rate()},
                        {"ideal_ttl", ideal_ttl.rate()}};
  std::printf("%s\n", out.dump().c_str());
  return {};
}

}  // namespace
}  // namespace deepinfer::bench

int main(int argc, char** argv) {
  return deepinfer::bench::tool_main(argc, argv, "deepinfer-bench-kvstore-trace", deepinfer::bench::kUsage,
                                     deepinfer::bench::run);
}
