// A decode worker's inbox of prefilled requests pushed to it (kv_transport.h), kept by transfer id
// until the router's request for them arrives on the token-level API. An entry nobody takes within
// keep_for (the router gave up, the request was aborted) is dropped, freeing its KV. Thread-safe.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "engine/engine_core.h"

namespace deepinfer::server {

class PrefilledInbox {
 public:
  explicit PrefilledInbox(std::chrono::milliseconds keep_for) : keep_for_(keep_for) {}
  // Replaces an entry of the same id (a prefill worker that pushed again).
  void put(const std::string& transfer_id, PrefilledRequest request);
  // Removes and returns the entry, or nullopt (never pushed, or expired).
  std::optional<PrefilledRequest> take(const std::string& transfer_id);
  size_t size() const;

 private:
  struct Entry {
    std::chrono::steady_clock::time_point arrived;
    PrefilledRequest request;
  };
  void expire_locked(std::chrono::steady_clock::time_point now);

  std::chrono::milliseconds keep_for_;
  mutable std::mutex mutex_;
  std::map<std::string, Entry> entries_;
};

}  // namespace deepinfer::server
