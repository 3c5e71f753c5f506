// Loading prompt pages from the persistent KV store into the device cache, and persisting
// finished sequences' pages.
#include "engine/kv_offload.h"

#include <algorithm>
#include <chrono>
#include <sstream>

#include "core/check.h"
#include "core/dtype.h"
#include "core/logging.h"
#include "engine/swa_replay.h"

namespace deepinfer {

KvOffload::KvOffload(CausalLM& model, KvCacheManager& kv, std::unique_ptr<KvStore> store, std::string fingerprint,
                     int32_t block_size, int32_t replay_tokens, int32_t replay_chunk)
    : model_(model),
      kv_(kv),
      store_(std::move(store)),
      fingerprint_(std::move(fingerprint)),
      block_size_(block_size),
      payload_bytes_(model.full_kv_bytes_per_block()),
      replay_tokens_(replay_tokens),
      replay_chunk_(replay_chunk) {}

Result<std::unique_ptr<KvOffload>> KvOffload::create(CausalLM& model, KvCacheManager& kv, const KvStoreConfig& config,
                                                     const std::string& fingerprint, int32_t block_size,
                                                     int32_t max_step_tokens) {
  if (config.swa_replay_tokens < kSwaReplayExact) {
    return Error{"swa_replay_tokens must be a token count, 0 (default) or -1 (exact), got " +
                 std::to_string(config.swa_replay_tokens)};
  }
  const int32_t replay_tokens =
      kv.has_swa_tables() ? swa_replay_tokens(model.config(), config.swa_replay_tokens, block_size) : 0;
  const int32_t replay_chunk = std::max(block_size, max_step_tokens / block_size * block_size);
  std::unique_ptr<KvOffload> offload(
      new KvOffload(model, kv, nullptr, fingerprint, block_size, replay_tokens, replay_chunk));
  KvStoreConfig store_config = config;
  store_config.kv_dtype = model.kv_cache_dtype();
  if (!store_config.host_pool) store_config.host_pool = offload->make_host_pool(config);
  auto store = KvStore::open(store_config, fingerprint);
  if (!store.ok()) return store.error();
  offload->store_ = std::move(*store);
  if (config.host_bytes > 0 && offload->payload_bytes_ > 0) offload->measure_host_load();
  offload->measure_prefill();
  if (replay_tokens > 0) {
    DI_LOG(kInfo, "kv store: full-attention layers' pages only; a hit replays up to "
                      << replay_tokens << " tokens for the sliding-window layers");
  }
  return offload;
}

std::shared_ptr<HostSlabPool> KvOffload::make_host_pool(const KvStoreConfig& config) const {
  // Slabs for the host tier's bytes plus an eighth for pages in flight (queued writes, loads on
  // their way to the device); past that, images use ordinary memory and are counted.
  if (config.host_bytes <= 0) return nullptr;
  const auto slab_bytes = page_image_bytes(block_size_, static_cast<size_t>(payload_bytes_));
  const auto host_slabs = static_cast<size_t>(config.host_bytes) / slab_bytes;
  const size_t num_slabs = host_slabs + std::max<size_t>(host_slabs / 8, 8);
  std::shared_ptr<HostSlabPool> pool = model_.backend().make_pinned_pool(num_slabs * slab_bytes, slab_bytes);
  if (pool) {
    DI_LOG(kInfo, "kv store: " << pool->num_slabs() << " pinned page slabs of " << pool->slab_bytes() << " bytes");
  }
  return pool;
}

KvStoreStats KvOffload::stats() const {
  KvStoreStats s = store_->stats();
  s.tokens_replayed = tokens_replayed_;
  return s;
}

KvOffload::~KvOffload() {
  const KvStoreStats s = store_->stats();
  std::ostringstream tiers;
  for (const TierStats& t : s.tiers) tiers << " " << t.name << " " << t.hits << " hits/" << t.pages_written << " written;";
  DI_LOG(kInfo, "kv store: " << s.pages_loaded << " pages loaded, " << s.pages_queued << " queued for writing ("
                             << s.queue_drops << " dropped);" << tiers.str());
}

void KvOffload::measure_prefill() {
  // Over free blocks that hold nothing yet; the KV written here is never registered or read.
  int32_t num_blocks = std::min<int32_t>(4, kv_.num_blocks());
  if (kv_.has_swa_tables()) num_blocks = std::min(num_blocks, kv_.num_swa_blocks());
  const int32_t max_positions = std::max<int32_t>(model_.config().max_position_embeddings, 2) - 1;
  const int32_t num_tokens = std::min(num_blocks * block_size_, max_positions);
  const std::vector<int32_t> zeros(static_cast<size_t>(num_tokens), 0);
  ForwardBatch batch = contiguous_sequence_batch(zeros, 0, num_blocks);
  if (kv_.has_swa_tables()) {
    batch.swa_slot_mapping = batch.slot_mapping;
    batch.swa_block_table = batch.block_table;
  }
  batch.logit_rows = {num_tokens - 1};
  std::vector<float> logits(static_cast<size_t>(model_.config().vocab_size));
  model_.forward(batch, logits.data());  // warm-up: first-call allocations and primitive setup
  const auto start = std::chrono::steady_clock::now();
  model_.forward(batch, logits.data());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  prefill_tokens_per_s_ = num_tokens / std::max(seconds, 1e-9);
  // The cost guard's inputs: a page is loaded from a tier when its cost there is below
  // block_size / prefill speed.
  std::ostringstream costs;
  const std::vector<TierCost>& tier_costs = store_->tier_costs();
  for (size_t t = 0; t < tier_costs.size(); ++t) {
    costs << " " << store_->stats().tiers[t].name << " " << tier_costs[t].bytes_per_s / 1e9 << " GB/s + "
          << tier_costs[t].seconds_per_page * 1e6 << " us/page (" << tier_costs[t].probe << ");";
  }
  DI_LOG(kInfo, "kv store: prefill " << static_cast<int64_t>(prefill_tokens_per_s_) << " tokens/s, "
                                     << payload_bytes_ << " bytes/page (" << dtype_name(model_.kv_cache_dtype())
                                     << "); loads:" << costs.str());
}

void KvOffload::measure_host_load() {
  // A host-tier hit costs the engine a lookup and the page's upload into its cache; time the
  // upload into block 0 (free: nothing is registered yet; measure_prefill overwrites it anyway).
  const KvStoreStats before = store_->stats();
  std::shared_ptr<PageBuffer> image = store_->stage_page(block_size_, payload_bytes_);
  const std::span<uint8_t> payload = page_payload_region(*image, block_size_);
  std::fill(payload.begin(), payload.end(), uint8_t{0});
  const bool pinned = store_->stats().host_pool_pages > before.host_pool_pages;
  Backend& backend = model_.backend();
  // A 4-byte read back after the uploads waits for them (the backend's copies are stream-ordered).
  DeviceBuffer fence = backend.allocate(sizeof(uint32_t));
  uint32_t sink = 0;
  model_.write_full_kv_blocks({0}, payload.data());  // warm-up: first-launch set-up
  backend.copy_to_host(&sink, fence.data(), sizeof(sink));
  constexpr int kRepeats = 8;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kRepeats; ++i) model_.write_full_kv_blocks({0}, payload.data());
  backend.copy_to_host(&sink, fence.data(), sizeof(sink));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  TierCost cost;
  cost.bytes_per_s = static_cast<double>(image->size()) * kRepeats / std::max(seconds, 1e-9);
  cost.seconds_per_page = 1e-6;  // the host tier's hash-map lookup
  cost.probe = std::string("page upload on ") + std::string(backend.name()) + (pinned ? " from a pinned slab" : "");
  store_->set_host_load_cost(cost);
}

std::vector<BlockHash> KvOffload::page_hashes(std::span<const int32_t> tokens, int32_t num_pages,
                                              const std::string& cache_salt) const {
  std::vector<BlockHash> hashes;
  hashes.reserve(static_cast<size_t>(num_pages));
  BlockHash hash = prefix_root_hash(fingerprint_, cache_salt);
  for (int32_t i = 0; i < num_pages; ++i) {
    hash = chain_block_hash(hash, tokens.data() + static_cast<ptrdiff_t>(i) * block_size_, block_size_, {});
    hashes.push_back(hash);
  }
  return hashes;
}

void KvOffload::hold(Request* request) {
  Held held;
  held.request = request;
  const std::span<const int32_t> prompt = request->prompt_cache_tokens();
  // As in the device cache, the page holding the last prompt token always runs (it gives logits).
  const auto num_pages = static_cast<int32_t>((prompt.size() - 1) / static_cast<size_t>(block_size_));
  held.first_page = kv_.num_cached_tokens(prompt, request->cache_salt) / block_size_;
  // A prompt_logprobs request has a salt of its own and needs every position's logits anyway.
  if (held.first_page < num_pages && !request->params.prompt_logprobs) {
    const std::vector<BlockHash> hashes = page_hashes(prompt, num_pages, request->cache_salt);
    std::vector<PageRequest> pages;
    for (int32_t i = held.first_page; i < num_pages; ++i) {
      PageRequest page;
      page.hash = hashes[static_cast<size_t>(i)];
      page.page_index = i;
      const auto begin = prompt.begin() + static_cast<ptrdiff_t>(i) * block_size_;
      page.token_ids.assign(begin, begin + block_size_);
      pages.push_back(std::move(page));
    }
    held.load = store_->load_chain_async(std::move(pages), payload_bytes_, block_size_ / prefill_tokens_per_s_,
                                         BodyCheck::kBeside);
  }
  held_.push_back(std::move(held));
}

void KvOffload::release(const Request* request) {
  // The loader thread finishes a discarded load on its own; the future's state keeps its result.
  std::erase_if(held_, [&](const Held& held) { return held.request == request; });
}

std::vector<Request*> KvOffload::take_ready(bool wait) {
  std::vector<Request*> ready;
  if (wait && !held_.empty() && held_.front().load) held_.front().load->wait();
  std::vector<Held> still_held;
  for (Held& held : held_) {
    if (held.load && held.load->wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      held.pages = held.load->get();
      held.load.reset();
    }
    const bool checked = std::all_of(held.pages.begin(), held.pages.end(), [](const LoadedPage& page) {
      return !page.body_ok.valid() || page.body_ok.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    });
    if (held.load || (!wait && !checked)) {
      still_held.push_back(std::move(held));
      continue;
    }
    import_pages(*held.request, held.first_page, held.pages);
    ready.push_back(held.request);
  }
  held_ = std::move(still_held);
  return ready;
}

size_t KvOffload::verified_until(const std::vector<LoadedPage>& pages, size_t from, size_t to) {
  for (size_t i = from; i < to; ++i) {
    if (!pages[i].verified()) return i;
  }
  return to;
}

void KvOffload::import_pages(const Request& request, int32_t first_page, const std::vector<LoadedPage>& pages) {
  // Split cache: the replay reads the loaded pages and starts R tokens before the prefix's end,
  // so the whole chain's checks come first (the replay's forward pass dwarfs them anyway).
  const size_t usable = replay_tokens_ > 0 ? verified_until(pages, 0, pages.size()) : pages.size();
  // A replay would run an image's placeholders without the image's rows: such a prompt recomputes.
  if (usable == 0 || (replay_tokens_ > 0 && !request.images().empty())) return;
  const std::span<const int32_t> tokens = request.prompt_cache_tokens();
  int32_t prefix = (first_page + static_cast<int32_t>(usable)) * block_size_;
  // Split cache: the sliding-window layers' KV is rebuilt from replay_start on; without one,
  // replay_start is the prefix's end and nothing runs.
  const int32_t replay_start = replay_tokens_ > 0 ? std::max(0, prefix - replay_tokens_) : prefix;
  const int64_t import_seq_id = next_import_seq_id_--;
  int32_t done = 0;
  // A short-lived sequence owns the blocks while they are written; freeing it leaves them in
  // the prefix index as cached blocks, exactly like a finished request's pages. It grows one
  // replay pass at a time, so the sliding-window pool needs only a window and a pass of blocks.
  const int32_t first_end = std::min(prefix, std::max(first_page * block_size_, replay_start) + replay_chunk_);
  if (!kv_.allocate_imported(import_seq_id, tokens, first_end, request.cache_salt,
                             replay_tokens_ > 0 ? replay_start : 0, &done)) {
    return;  // no room now: the request recomputes these pages
  }
  import_stats_.queried_tokens += request.num_prompt_tokens();
  import_stats_.hit_tokens += done;
  // A device page the lookup counted on was evicted meanwhile: the chain has a hole, so skip.
  if (done < first_page * block_size_) {
    kv_.free(import_seq_id);
    return;
  }
  while (done < prefix) {
    int32_t end = std::min(prefix, std::max(done, replay_start) + replay_chunk_);
    int32_t ignored = 0;
    if (!kv_.allocate(import_seq_id, tokens, end, request.cache_salt, &ignored)) break;  // the rest is recomputed
    const std::vector<int32_t>& table = kv_.block_table(import_seq_id);
    for (int32_t i = done / block_size_; i < end / block_size_; ++i) {
      const LoadedPage& page = pages[static_cast<size_t>(i - first_page)];
      DI_CHECK(static_cast<int64_t>(page.payload.size()) == payload_bytes_);
      // From a pinned slab this is a DMA still running on return, and `pages` may be freed right
      // after: the pool hands the slab out again only once the copy ended (runtime/cuda/pinned_pool.h).
      model_.write_full_kv_blocks({table[static_cast<size_t>(i)]}, page.payload.data());
    }
    if (replay_tokens_ == 0) {
      // The pass's uploads are queued; meanwhile the verify threads check their bodies. Only the
      // pages before the first failure are committed: the blocks of the rest go back unregistered,
      // never read by attention, as if they had not been loaded (the request recomputes them).
      const auto pass_first = static_cast<size_t>(done / block_size_ - first_page);
      const auto pass_end = static_cast<size_t>(end / block_size_ - first_page);
      const size_t good = verified_until(pages, pass_first, pass_end);
      if (good < pass_end) prefix = end = (first_page + static_cast<int32_t>(good)) * block_size_;
      if (end <= done) break;
    }
    if (end > replay_start) {
      const int32_t from = std::max(done, replay_start);
      run_swa_replay(model_, tokens, from, end, table, kv_.swa_block_table(import_seq_id), block_size_, replay_logits_);
      tokens_replayed_ += end - from;
    }
    kv_.commit_computed(import_seq_id, tokens, end);
    done = end;
  }
  kv_.free(import_seq_id);
}

std::vector<BlockHash> KvOffload::persist(const Request& request, const std::vector<int32_t>& block_table) {
  std::vector<BlockHash> queued;
  if (request.params.prompt_logprobs) return queued;
  const std::span<const int32_t> tokens = request.cache_tokens();
  const int32_t num_pages = std::min(request.num_computed_tokens / block_size_, static_cast<int32_t>(block_table.size()));
  const std::vector<BlockHash> hashes = page_hashes(tokens, num_pages, request.cache_salt);
  for (int32_t i = 0; i < num_pages; ++i) {
    const int32_t block_id = block_table[static_cast<size_t>(i)];
    const BlockHash& hash = hashes[static_cast<size_t>(i)];
    if (block_id < 0 || store_->contains_local(hash)) continue;
    PageWrite write;
    write.hash = hash;
    write.page_index = i;
    write.traffic_class = request.kv_cache_class;
    const auto begin = tokens.begin() + static_cast<ptrdiff_t>(i) * block_size_;
    write.token_ids.assign(begin, begin + block_size_);
    // Straight into the image (a pinned slab on CUDA: the device writes it by DMA, no staging).
    write.staged = store_->stage_page(block_size_, payload_bytes_);
    model_.read_full_kv_blocks({block_id}, page_payload_region(*write.staged, block_size_).data());
    if (!store_->enqueue_write(std::move(write))) return queued;  // queue full: later pages would drop too
    queued.push_back(hash);
  }
  return queued;
}

}  // namespace deepinfer
