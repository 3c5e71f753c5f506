// Prometheus metrics of the server (text exposition format, names prefixed deepinfer_): request
// counts by endpoint and status, engine gauges, token counters, latency histograms and the
// persistent KV store's counters by tier.
// Thread-safe: the engine thread and the HTTP threads record, /metrics renders.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/speculator.h"
#include "kvstore/kv_store.h"

namespace deepinfer::server {

// Cumulative-bucket histogram; bounds are upper bounds in seconds.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // Appends the _bucket, _sum and _count lines of metric `name`.
  void render(const std::string& name, std::string& out) const;

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // one per bound, plus +Inf
  double sum_ = 0.0;
  int64_t count_ = 0;
};

// What the engine thread publishes after each step.
struct EngineGauges {
  int64_t num_waiting = 0;
  int64_t num_running = 0;
  double kv_usage = 0.0;
  int64_t prefix_queried_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t num_preemptions = 0;
  int64_t num_overlapped_steps = 0;  // EngineStats::num_overlapped_steps
  std::optional<KvStoreStats> kv_store;  // absent: the server runs without --kv-cache-dir
  std::optional<SpeculativeStats> speculative;  // absent: without --speculative-tokens
  int64_t num_encoded_images = 0;               // EngineStats::num_encoded_images
};

// An image encoder service's (serve --role encoder: image_encoder_service.h) queue and count.
struct EncoderGauges {
  int64_t queued_images = 0;  // waiting or being encoded
  int64_t queued_tokens = 0;  // the rows they become
  int64_t encoded_images = 0;
};

class Metrics {
 public:
  Metrics();

  void record_request(const std::string& endpoint, int status);
  void set_engine(const EngineGauges& gauges);
  EngineGauges engine() const;
  void set_encoder(const EncoderGauges& gauges);
  void observe_image_encode(double seconds);
  void add_prompt_tokens(int64_t num_tokens);
  void add_generation_tokens(int64_t num_tokens);
  void observe_ttft(double seconds);
  void observe_inter_token(double seconds);
  void observe_e2e(double seconds);

  // The whole exposition, "# HELP" and "# TYPE" lines included.
  std::string render() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  EngineGauges engine_;
  std::optional<EncoderGauges> encoder_;  // an image encoder service's
  int64_t prompt_tokens_ = 0;
  int64_t generation_tokens_ = 0;
  Histogram ttft_;
  Histogram inter_token_;
  Histogram e2e_;
  Histogram image_encode_;
};

}  // namespace deepinfer::server
