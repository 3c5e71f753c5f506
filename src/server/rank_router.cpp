// RankRouter's balance and the byte relay to another rank's HTTP server.
#include "server/rank_router.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <tuple>

namespace deepinfer::server {

namespace asio = boost::asio;

namespace {

std::chrono::steady_clock::duration write_timeout(const ServerContext& context) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(context.config.write_timeout_s));
}

}  // namespace

Result<RankRouting> parse_rank_routing(std::string_view name) {
  if (name == "least-loaded") return RankRouting::kLeastLoaded;
  if (name == "prefix-affinity") return RankRouting::kPrefixAffinity;
  return Error{"--data-parallel-routing must be least-loaded or prefix-affinity, got '" + std::string(name) + "'"};
}

std::vector<uint64_t> block_keys(const std::vector<BlockHash>& blocks) {
  std::vector<uint64_t> keys(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) std::memcpy(&keys[i], blocks[i].data(), sizeof(uint64_t));
  return keys;
}

RoutedRequest routed_request(std::span<const int32_t> prompt_token_ids, const SamplingParams& sampling,
                             std::string_view model_name, std::string_view cache_salt, int32_t block_size,
                             const std::vector<ImageInput>& images) {
  RoutedRequest routed;
  routed.prompt_tokens = static_cast<int64_t>(prompt_token_ids.size());
  routed.tokens = routed.prompt_tokens + static_cast<int64_t>(sampling.n) * sampling.max_tokens;
  if (block_size > 0) {
    BlockHashChain chain(prefix_root_hash(model_name, cache_salt), block_size);
    if (images.empty()) {
      chain.extend(prompt_token_ids);
    } else {
      chain.extend(image_cache_tokens(prompt_token_ids, image_placeholders(prompt_token_ids, images)));
    }
    routed.prompt_blocks.reserve(static_cast<size_t>(chain.num_blocks()));
    for (int32_t i = 0; i < chain.num_blocks(); ++i) routed.prompt_blocks.push_back(chain.hash(i));
  }
  return routed;
}

RankRouter::RankRouter(std::vector<RankAddress> addresses, RankRouterOptions options) : options_(options) {
  ranks_.resize(addresses.size());
  for (size_t r = 0; r < addresses.size(); ++r) {
    ranks_[r].address = std::move(addresses[r]);
    ranks_[r].blocks = PrefixLru(std::max<int64_t>(options_.remembered_blocks_per_rank, 1));
  }
}

int32_t RankRouter::acquire(const RoutedRequest& request) {
  std::lock_guard lock(mutex_);
  size_t least = 0;
  for (size_t r = 1; r < ranks_.size(); ++r) {
    const Rank& a = ranks_[r];
    const Rank& b = ranks_[least];
    if (std::tie(a.outstanding_tokens, a.outstanding_requests, a.routed) <
        std::tie(b.outstanding_tokens, b.outstanding_requests, b.routed)) {
      least = r;
    }
  }
  size_t chosen = least;
  const bool affinity = options_.routing == RankRouting::kPrefixAffinity && !request.prompt_blocks.empty();
  const std::vector<uint64_t> keys = affinity ? block_keys(request.prompt_blocks) : std::vector<uint64_t>();
  if (affinity) {
    const int64_t busiest_allowed = ranks_[least].outstanding_tokens + options_.affinity_slack_tokens;
    int64_t best_matches = ranks_[least].blocks.count_leading_blocks(keys);
    for (size_t r = 0; r < ranks_.size(); ++r) {
      if (ranks_[r].outstanding_tokens > busiest_allowed) continue;
      const int64_t matches = ranks_[r].blocks.count_leading_blocks(keys);
      if (matches > best_matches) {
        best_matches = matches;
        chosen = r;
      }
    }
  }
  Rank& rank = ranks_[chosen];
  rank.outstanding_tokens += request.tokens;
  ++rank.outstanding_requests;
  ++rank.routed;
  if (chosen != least) ++rank.routed_by_affinity;
  if (affinity) rank.blocks.use(keys);
  return static_cast<int32_t>(chosen);
}

void RankRouter::release(int32_t rank, int64_t tokens) {
  std::lock_guard lock(mutex_);
  Rank& r = ranks_[static_cast<size_t>(rank)];
  r.outstanding_tokens -= tokens;
  --r.outstanding_requests;
}

void RankRouter::render_metrics(std::string& out) const {
  std::lock_guard lock(mutex_);
  out += "# HELP deepinfer_rank_outstanding_tokens Tokens of requests the front sent to a data-parallel rank and "
         "has not seen finish (prompt tokens plus n x max_tokens).\n"
         "# TYPE deepinfer_rank_outstanding_tokens gauge\n";
  int64_t total = 0, busiest = 0;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    out += "deepinfer_rank_outstanding_tokens{rank=\"" + std::to_string(r) + "\"} " +
           std::to_string(ranks_[r].outstanding_tokens) + "\n";
    total += ranks_[r].outstanding_tokens;
    busiest = std::max(busiest, ranks_[r].outstanding_tokens);
  }
  out += "# HELP deepinfer_rank_outstanding_requests Requests in flight per data-parallel rank.\n"
         "# TYPE deepinfer_rank_outstanding_requests gauge\n";
  for (size_t r = 0; r < ranks_.size(); ++r) {
    out += "deepinfer_rank_outstanding_requests{rank=\"" + std::to_string(r) + "\"} " +
           std::to_string(ranks_[r].outstanding_requests) + "\n";
  }
  out += "# HELP deepinfer_rank_routed_requests_total Generation requests the front sent to each rank.\n"
         "# TYPE deepinfer_rank_routed_requests_total counter\n";
  for (size_t r = 0; r < ranks_.size(); ++r) {
    out += "deepinfer_rank_routed_requests_total{rank=\"" + std::to_string(r) + "\"} " +
           std::to_string(ranks_[r].routed) + "\n";
  }
  out += "# HELP deepinfer_rank_routed_by_prefix_affinity_total Requests sent to a rank for the prompt blocks it "
         "likely holds where load alone would have picked another (--data-parallel-routing prefix-affinity).\n"
         "# TYPE deepinfer_rank_routed_by_prefix_affinity_total counter\n";
  for (size_t r = 0; r < ranks_.size(); ++r) {
    out += "deepinfer_rank_routed_by_prefix_affinity_total{rank=\"" + std::to_string(r) + "\"} " +
           std::to_string(ranks_[r].routed_by_affinity) + "\n";
  }
  const double mean = static_cast<double>(total) / static_cast<double>(ranks_.size());
  out += "# HELP deepinfer_rank_balance_ratio The busiest rank's outstanding tokens over the mean (1: even or idle).\n"
         "# TYPE deepinfer_rank_balance_ratio gauge\n"
         "deepinfer_rank_balance_ratio " +
         std::to_string(total > 0 ? static_cast<double>(busiest) / mean : 1.0) + "\n";
}

asio::awaitable<bool> relay_to_rank(TcpStream& client, const HttpRequest& request, ApiKind kind, int32_t rank,
                                    const RankAddress& address, ServerContext& context) {
  const std::string where = "data-parallel rank " + std::to_string(rank) + " (" + address.host + ":" +
                            std::to_string(address.port) + ")";
  TcpStream upstream(co_await asio::this_coro::executor);
  boost::system::error_code ec;
  const auto endpoint = asio::ip::tcp::endpoint(asio::ip::make_address(address.host, ec), address.port);
  if (!ec) {
    upstream.expires_after(std::chrono::seconds(10));
    std::tie(ec) = co_await upstream.async_connect(endpoint, asio::as_tuple(asio::use_awaitable));
  }
  HttpRequest forwarded = request;
  forwarded.keep_alive(false);
  forwarded.prepare_payload();
  if (!ec) {
    upstream.expires_after(write_timeout(context));
    std::tie(ec, std::ignore) = co_await http::async_write(upstream, forwarded, asio::as_tuple(asio::use_awaitable));
  }
  if (ec) {
    context.metrics->record_request("relay", 503);
    const ApiError error = api_error(kind, 503, where + " cannot be reached: " + ec.message());
    HttpResponse response = make_error_response(request, kind, error);
    response.keep_alive(false);  // the connection closes after it: say so, or a client reuses it
    co_await write_response(client, std::move(response), context.config.write_timeout_s);
    co_return false;
  }
  // The rank answers within its own request timeout; a stream may be quiet while it queues.
  upstream.expires_never();
  std::array<char, 16384> buffer{};
  for (;;) {
    auto [read_error, n] = co_await upstream.async_read_some(asio::buffer(buffer), asio::as_tuple(asio::use_awaitable));
    if (n > 0) {
      client.expires_after(write_timeout(context));
      auto [write_error, written] =
          co_await asio::async_write(client, asio::buffer(buffer.data(), n), asio::as_tuple(asio::use_awaitable));
      (void)written;
      if (write_error) co_return false;  // the client left: closing upstream aborts the request there
    }
    if (read_error) break;
  }
  co_return false;
}

}  // namespace deepinfer::server
