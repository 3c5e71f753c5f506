// Prometheus text rendering of the server's metrics.
#include "server/metrics.h"

#include <cstdio>

namespace deepinfer::server {
namespace {

std::string number(double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", value);
  return buf;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void sample(std::string& out, const std::string& name, double value) { out += name + ' ' + number(value) + '\n'; }

// Latency buckets from 1 ms to 2 min, as vLLM spaces its TTFT buckets.
std::vector<double> latency_bounds() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
          120.0};
}

// The per-tier families: one sample per store tier each, labelled tier="host|disk|redis".
struct TierFamily {
  const char* name;
  const char* type;
  const char* help;
  int64_t TierStats::*field;
};
constexpr TierFamily kTierFamilies[] = {
    {"deepinfer_kv_store_hits_total", "counter", "KV pages found in the tier.", &TierStats::hits},
    {"deepinfer_kv_store_misses_total", "counter", "KV pages looked up and not found in the tier.", &TierStats::misses},
    {"deepinfer_kv_store_bytes_read_total", "counter", "Bytes of KV pages read from the tier.", &TierStats::bytes_read},
    {"deepinfer_kv_store_bytes_written_total", "counter", "Bytes of KV pages written to the tier.",
     &TierStats::bytes_written},
    {"deepinfer_kv_store_pages_written_total", "counter", "KV pages written to the tier.", &TierStats::pages_written},
    {"deepinfer_kv_store_evictions_total", "counter", "KV pages dropped for the tier's capacity.", &TierStats::evictions},
    {"deepinfer_kv_store_expirations_total", "counter", "KV pages dropped when their TTL ran out.",
     &TierStats::expirations},
    {"deepinfer_kv_store_checksum_failures_total", "counter", "KV pages read from the tier that failed verification.",
     &TierStats::checksum_failures},
    {"deepinfer_kv_store_errors_total", "counter",
     "I/O or connection failures of the tier (each a miss or a dropped write).", &TierStats::errors},
    {"deepinfer_kv_store_pages", "gauge", "KV pages the tier holds.", &TierStats::num_pages},
    {"deepinfer_kv_store_bytes", "gauge", "Bytes of KV pages the tier holds.", &TierStats::used_bytes},
};

// The store-wide counters.
struct StoreCounter {
  const char* name;
  const char* help;
  int64_t KvStoreStats::*field;
};
constexpr StoreCounter kStoreCounters[] = {
    {"deepinfer_kv_store_pages_queued_total", "KV pages accepted by the store's write queue.",
     &KvStoreStats::pages_queued},
    {"deepinfer_kv_store_queue_drops_total", "KV pages not stored because the write queue was full.",
     &KvStoreStats::queue_drops},
    {"deepinfer_kv_store_pages_loaded_total", "Verified KV pages loaded into the device cache.",
     &KvStoreStats::pages_loaded},
    {"deepinfer_kv_store_loads_skipped_by_cost_total", "KV pages recomputed because loading them was estimated slower.",
     &KvStoreStats::loads_skipped_by_cost},
    {"deepinfer_kv_store_tokens_replayed_total", "Prefix tokens run again to rebuild sliding-window KV on hits.",
     &KvStoreStats::tokens_replayed},
    {"deepinfer_kv_store_host_pool_pages_total", "KV page images placed in the pinned host pool's slabs.",
     &KvStoreStats::host_pool_pages},
    {"deepinfer_kv_store_host_pool_fallbacks_total",
     "KV page images put in ordinary memory because the pinned host pool was full.", &KvStoreStats::host_pool_fallbacks},
};

void render_kv_store(std::string& out, const KvStoreStats& store) {
  for (const TierFamily& family : kTierFamilies) {
    header(out, family.name, family.type, family.help);
    for (const TierStats& tier : store.tiers) {
      out += std::string(family.name) + "{tier=\"" + tier.name + "\"} " + std::to_string(tier.*family.field) + '\n';
    }
  }
  for (const StoreCounter& counter : kStoreCounters) {
    header(out, counter.name, "counter", counter.help);
    sample(out, counter.name, static_cast<double>(store.*counter.field));
  }
}

// Speculative decoding's counters, and its per-position counts.
struct SpeculativeCounter {
  const char* name;
  const char* help;
  int64_t SpeculativeStats::*field;
};
constexpr SpeculativeCounter kSpeculativeCounters[] = {
    {"deepinfer_spec_verify_steps_total", "Steps that verified draft tokens.", &SpeculativeStats::verify_steps},
    {"deepinfer_spec_verify_rows_total", "Decode rows of those steps: one per decoding sequence plus its verified drafts.",
     &SpeculativeStats::verify_rows},
    {"deepinfer_spec_draft_calls_total", "Draft-module forward calls.", &SpeculativeStats::draft_calls},
    {"deepinfer_spec_skipped_draft_steps_total",
     "Steps after which drafting was skipped because it would not pay (--spec-varlen on).",
     &SpeculativeStats::skipped_draft_steps},
};
struct SpeculativePositions {
  const char* name;
  const char* help;
  std::vector<int64_t> SpeculativeStats::*field;
};
constexpr SpeculativePositions kSpeculativePositions[] = {
    {"deepinfer_spec_draft_tokens_total", "Draft tokens verified, by position in the chain.",
     &SpeculativeStats::proposed_per_position},
    {"deepinfer_spec_accepted_tokens_total", "Draft tokens accepted, by position in the chain.",
     &SpeculativeStats::accepted_per_position},
};

void render_speculative(std::string& out, const SpeculativeStats& s) {
  for (const SpeculativeCounter& counter : kSpeculativeCounters) {
    header(out, counter.name, "counter", counter.help);
    sample(out, counter.name, static_cast<double>(s.*counter.field));
  }
  for (const SpeculativePositions& family : kSpeculativePositions) {
    header(out, family.name, "counter", family.help);
    const std::vector<int64_t>& counts = s.*family.field;
    for (size_t k = 0; k < counts.size(); ++k) {
      out += std::string(family.name) + "{position=\"" + std::to_string(k + 1) + "\"} " + std::to_string(counts[k]) +
             '\n';
    }
  }
  header(out, "deepinfer_spec_acceptance_length", "histogram", "Drafts accepted per verification of a sequence.");
  int64_t cumulative = 0;
  int64_t sum = 0;
  for (size_t a = 0; a < s.accepted_length.size(); ++a) {
    cumulative += s.accepted_length[a];
    sum += static_cast<int64_t>(a) * s.accepted_length[a];
    out += "deepinfer_spec_acceptance_length_bucket{le=\"" + std::to_string(a) + "\"} " + std::to_string(cumulative) +
           '\n';
  }
  out += "deepinfer_spec_acceptance_length_bucket{le=\"+Inf\"} " + std::to_string(cumulative) + '\n';
  out += "deepinfer_spec_acceptance_length_sum " + std::to_string(sum) + '\n';
  out += "deepinfer_spec_acceptance_length_count " + std::to_string(cumulative) + '\n';
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::render(const std::string& name, std::string& out) const {
  int64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += name + "_bucket{le=\"" + number(bounds_[i]) + "\"} " + std::to_string(cumulative) + '\n';
  }
  cumulative += counts_.back();
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(cumulative) + '\n';
  sample(out, name + "_sum", sum_);
  out += name + "_count " + std::to_string(count_) + '\n';
}

Metrics::Metrics()
    : ttft_(latency_bounds()),
      inter_token_(latency_bounds()),
      e2e_(latency_bounds()),
      image_encode_(latency_bounds()) {}

void Metrics::record_request(const std::string& endpoint, int status) {
  std::lock_guard lock(mutex_);
  ++requests_[{endpoint, status}];
}

void Metrics::set_engine(const EngineGauges& gauges) {
  std::lock_guard lock(mutex_);
  engine_ = gauges;
}

EngineGauges Metrics::engine() const {
  std::lock_guard lock(mutex_);
  return engine_;
}

void Metrics::set_encoder(const EncoderGauges& gauges) {
  std::lock_guard lock(mutex_);
  encoder_ = gauges;
}

void Metrics::observe_image_encode(double seconds) {
  std::lock_guard lock(mutex_);
  image_encode_.observe(seconds);
}

void Metrics::add_prompt_tokens(int64_t num_tokens) {
  std::lock_guard lock(mutex_);
  prompt_tokens_ += num_tokens;
}

void Metrics::add_generation_tokens(int64_t num_tokens) {
  std::lock_guard lock(mutex_);
  generation_tokens_ += num_tokens;
}

void Metrics::observe_ttft(double seconds) {
  std::lock_guard lock(mutex_);
  ttft_.observe(seconds);
}

void Metrics::observe_inter_token(double seconds) {
  std::lock_guard lock(mutex_);
  inter_token_.observe(seconds);
}

void Metrics::observe_e2e(double seconds) {
  std::lock_guard lock(mutex_);
  e2e_.observe(seconds);
}

std::string Metrics::render() const {
  std::lock_guard lock(mutex_);
  std::string out;
  header(out, "deepinfer_requests_total", "counter", "HTTP requests answered, by endpoint and status code.");
  for (const auto& [key, count] : requests_) {
    out += "deepinfer_requests_total{endpoint=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"} " +
           std::to_string(count) + '\n';
  }
  header(out, "deepinfer_num_requests_waiting", "gauge", "Requests admitted to the engine and not yet scheduled.");
  sample(out, "deepinfer_num_requests_waiting", static_cast<double>(engine_.num_waiting));
  header(out, "deepinfer_num_requests_running", "gauge", "Requests the engine is running.");
  sample(out, "deepinfer_num_requests_running", static_cast<double>(engine_.num_running));
  header(out, "deepinfer_kv_cache_usage_ratio", "gauge", "Fraction of KV cache blocks in use (0 to 1).");
  sample(out, "deepinfer_kv_cache_usage_ratio", engine_.kv_usage);
  header(out, "deepinfer_prompt_tokens_total", "counter", "Prompt tokens of the requests the engine ran.");
  sample(out, "deepinfer_prompt_tokens_total", static_cast<double>(prompt_tokens_));
  header(out, "deepinfer_generation_tokens_total", "counter", "Tokens generated.");
  sample(out, "deepinfer_generation_tokens_total", static_cast<double>(generation_tokens_));
  header(out, "deepinfer_prefix_cache_queries_tokens_total", "counter", "Prompt tokens looked up in the prefix cache.");
  sample(out, "deepinfer_prefix_cache_queries_tokens_total", static_cast<double>(engine_.prefix_queried_tokens));
  header(out, "deepinfer_prefix_cache_hits_tokens_total", "counter", "Prompt tokens found in the prefix cache.");
  sample(out, "deepinfer_prefix_cache_hits_tokens_total", static_cast<double>(engine_.prefix_hit_tokens));
  header(out, "deepinfer_num_preemptions_total", "counter", "Sequences preempted for lack of KV blocks.");
  sample(out, "deepinfer_num_preemptions_total", static_cast<double>(engine_.num_preemptions));
  header(out, "deepinfer_overlapped_steps_total", "counter",
         "Steps launched while the one before was still running (the pipelined step loop).");
  sample(out, "deepinfer_overlapped_steps_total", static_cast<double>(engine_.num_overlapped_steps));
  header(out, "deepinfer_time_to_first_token_seconds", "histogram", "From admission to the first generated token.");
  ttft_.render("deepinfer_time_to_first_token_seconds", out);
  header(out, "deepinfer_inter_token_latency_seconds", "histogram", "Between consecutive tokens of a sequence.");
  inter_token_.render("deepinfer_inter_token_latency_seconds", out);
  header(out, "deepinfer_e2e_request_latency_seconds", "histogram", "From admission to the last token.");
  e2e_.render("deepinfer_e2e_request_latency_seconds", out);
  header(out, "deepinfer_images_encoded_total", "counter",
         "Images run through this process's image encoder (not those that came encoded or hit its encoder cache).");
  sample(out, "deepinfer_images_encoded_total",
         static_cast<double>(engine_.num_encoded_images + (encoder_ ? encoder_->encoded_images : 0)));
  if (encoder_) {
    header(out, "deepinfer_encoder_queued_images", "gauge", "Images queued at this image encoder or being encoded.");
    sample(out, "deepinfer_encoder_queued_images", static_cast<double>(encoder_->queued_images));
    header(out, "deepinfer_encoder_queued_tokens", "gauge", "The rows the queued images become.");
    sample(out, "deepinfer_encoder_queued_tokens", static_cast<double>(encoder_->queued_tokens));
    header(out, "deepinfer_image_encode_seconds", "histogram", "One image through the image encoder.");
    image_encode_.render("deepinfer_image_encode_seconds", out);
  }
  if (engine_.kv_store) render_kv_store(out, *engine_.kv_store);
  if (engine_.speculative) render_speculative(out, *engine_.speculative);
  return out;
}

}  // namespace deepinfer::server
