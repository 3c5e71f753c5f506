// EncoderSelector: the registered image encoders and the least-loaded choice among them.
#include "server/encoder_selector.h"

#include <algorithm>
#include <tuple>

namespace deepinfer::server {

std::vector<std::string> EncoderSelector::update(const std::vector<WorkerRecord>& records) {
  std::vector<std::string> log;
  std::lock_guard lock(mutex_);
  std::map<std::string, const WorkerRecord*> listed;
  for (const WorkerRecord& record : records) {
    if (record.role == "encoder" && record.model == model_) listed[record.id] = &record;
  }
  for (auto it = encoders_.begin(); it != encoders_.end();) {
    if (listed.contains(it->first)) {
      ++it;
      continue;
    }
    log.push_back("image encoder " + it->first + " left the registry (its key expired or it deregistered)");
    it = encoders_.erase(it);
  }
  for (const auto& [id, record] : listed) {
    auto [it, added] = encoders_.try_emplace(id);
    Encoder& encoder = it->second;
    if (added) log.push_back("image encoder " + id + " joined");
    if (encoder.failed && record->heartbeat > encoder.failed_at_heartbeat) {
      encoder.failed = false;
      log.push_back("image encoder " + id + " is alive again (a newer heartbeat)");
    }
    encoder.record = *record;
  }
  return log;
}

std::optional<EncoderLease> EncoderSelector::acquire(int64_t tokens, const std::vector<std::string>& exclude) {
  std::lock_guard lock(mutex_);
  Encoder* best = nullptr;
  const auto load = [](const Encoder& e) {
    return std::make_tuple(std::max(e.outstanding_tokens, e.record.load.queued_tokens), e.sent_requests);
  };
  for (auto& [id, encoder] : encoders_) {
    if (encoder.failed || std::find(exclude.begin(), exclude.end(), id) != exclude.end()) continue;
    if (best == nullptr || load(encoder) < load(*best)) best = &encoder;
  }
  if (best == nullptr) return std::nullopt;
  best->outstanding_tokens += tokens;
  best->sent_requests += 1;
  return EncoderLease{best->record.id, best->record.host, best->record.port, tokens};
}

void EncoderSelector::release(const EncoderLease& lease) {
  std::lock_guard lock(mutex_);
  auto it = encoders_.find(lease.id);
  // At least 0: an encoder that left and came back under the same id while the lease was out
  // starts its count afresh.
  if (it != encoders_.end())
    it->second.outstanding_tokens = std::max<int64_t>(0, it->second.outstanding_tokens - lease.tokens);
}

void EncoderSelector::mark_failed(const std::string& id) {
  std::lock_guard lock(mutex_);
  auto it = encoders_.find(id);
  if (it == encoders_.end()) return;
  it->second.failed = true;
  it->second.failed_at_heartbeat = it->second.record.heartbeat;
  ++it->second.failures;
}

size_t EncoderSelector::num_live() const {
  std::lock_guard lock(mutex_);
  return static_cast<size_t>(
      std::count_if(encoders_.begin(), encoders_.end(), [](const auto& entry) { return !entry.second.failed; }));
}

void EncoderSelector::count_fallback() {
  std::lock_guard lock(mutex_);
  ++fallbacks_;
}

void EncoderSelector::render_metrics(std::string& out) const {
  std::lock_guard lock(mutex_);
  const auto live = std::count_if(encoders_.begin(), encoders_.end(), [](const auto& e) { return !e.second.failed; });
  out += "# HELP deepinfer_router_encoders Image encoders of the router's model in the registry, and those live.\n";
  out += "# TYPE deepinfer_router_encoders gauge\n";
  out += "deepinfer_router_encoders{state=\"registered\"} " + std::to_string(encoders_.size()) + "\n";
  out += "deepinfer_router_encoders{state=\"live\"} " + std::to_string(live) + "\n";
  out +=
      "# HELP deepinfer_router_image_fallbacks_total Times a request's images went to a worker as files: no image "
      "encoder took them, or their rows would pass the worker's body limit.\n"
      "# TYPE deepinfer_router_image_fallbacks_total counter\n";
  out += "deepinfer_router_image_fallbacks_total " + std::to_string(fallbacks_) + "\n";
  const auto per_encoder = [&](const char* name, const char* type, const char* help, auto value) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    for (const auto& [id, encoder] : encoders_) {
      out += std::string(name) + "{worker=\"" + id + "\"} " + std::to_string(value(encoder)) + "\n";
    }
  };
  per_encoder("deepinfer_encoder_outstanding_tokens", "gauge",
              "Image tokens the router sent the encoder and has not had back.",
              [](const Encoder& e) { return e.outstanding_tokens; });
  per_encoder("deepinfer_encoder_requests_total", "counter",
              "Requests (their images together) the router sent the encoder.",
              [](const Encoder& e) { return e.sent_requests; });
  per_encoder("deepinfer_encoder_failures_total", "counter", "Times the router could not use the encoder.",
              [](const Encoder& e) { return e.failures; });
  per_encoder("deepinfer_encoder_reported_queued_tokens", "gauge", "The encoder's queue at its last heartbeat.",
              [](const Encoder& e) { return e.record.load.queued_tokens; });
}

}  // namespace deepinfer::server
