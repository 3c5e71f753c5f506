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

Metrics::Metrics() : ttft_(latency_bounds()), inter_token_(latency_bounds()), e2e_(latency_bounds()) {}

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
  header(out, "deepinfer_time_to_first_token_seconds", "histogram", "From admission to the first generated token.");
  ttft_.render("deepinfer_time_to_first_token_seconds", out);
  header(out, "deepinfer_inter_token_latency_seconds", "histogram", "Between consecutive tokens of a sequence.");
  inter_token_.render("deepinfer_inter_token_latency_seconds", out);
  header(out, "deepinfer_e2e_request_latency_seconds", "histogram", "From admission to the last token.");
  e2e_.render("deepinfer_e2e_request_latency_seconds", out);
  return out;
}

}  // namespace deepinfer::server
