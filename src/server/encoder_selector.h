// The router's image encoder balancer (the seeds' third load balancer, beside prefill and decode):
// the registered workers of role "encoder" serving the router's model (serve --role encoder), and
// the image tokens the router sent each and has not had back. A request's images go to the live
// encoder with the fewest outstanding image tokens (the larger of the router's own count and the
// queue the encoder last reported, which counts other routers' images too); ties go to the one sent
// the fewest requests so far, so sequential requests spread. An encoder the router could not use is
// marked failed and skipped until a newer heartbeat. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "server/worker_record.h"

namespace deepinfer::server {

struct EncoderLease {
  std::string id;
  std::string host;
  uint16_t port = 0;
  int64_t tokens = 0;  // the images' rows, counted on the encoder until release()
};

class EncoderSelector {
 public:
  explicit EncoderSelector(std::string model) : model_(std::move(model)) {}

  // The registry's listing (every role: the encoders of this model are taken from it). Returns
  // the lines worth logging (an encoder joined, left, came back).
  std::vector<std::string> update(const std::vector<WorkerRecord>& records);
  // The encoder for images becoming `tokens` rows, outside exclude; nullopt when none is live.
  std::optional<EncoderLease> acquire(int64_t tokens, const std::vector<std::string>& exclude = {});
  void release(const EncoderLease& lease);
  void mark_failed(const std::string& id);
  size_t num_live() const;
  // A request's images went to a worker as files: no encoder could take them, or their rows would
  // pass the worker's body limit.
  void count_fallback();

  // Prometheus lines: encoders registered and live, the fallbacks, and per encoder (label worker="host:port") the
  // router's outstanding image tokens, images sent, failures and its reported queue.
  void render_metrics(std::string& out) const;

 private:
  struct Encoder {
    WorkerRecord record;
    bool failed = false;
    int64_t failed_at_heartbeat = 0;
    int64_t outstanding_tokens = 0;
    int64_t sent_requests = 0;
    int64_t failures = 0;
  };

  std::string model_;
  mutable std::mutex mutex_;
  std::map<std::string, Encoder> encoders_;  // by id
  int64_t fallbacks_ = 0;
};

}  // namespace deepinfer::server
