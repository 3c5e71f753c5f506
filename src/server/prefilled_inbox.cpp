// PrefilledInbox: pushed prefilled requests by transfer id, with expiry.
#include "server/prefilled_inbox.h"

namespace deepinfer::server {

void PrefilledInbox::put(const std::string& transfer_id, PrefilledRequest request) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mutex_);
  expire_locked(now);
  entries_.insert_or_assign(transfer_id, Entry{now, std::move(request)});
}

std::optional<PrefilledRequest> PrefilledInbox::take(const std::string& transfer_id) {
  std::lock_guard lock(mutex_);
  expire_locked(std::chrono::steady_clock::now());
  auto it = entries_.find(transfer_id);
  if (it == entries_.end()) return std::nullopt;
  PrefilledRequest request = std::move(it->second.request);
  entries_.erase(it);
  return request;
}

size_t PrefilledInbox::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

void PrefilledInbox::expire_locked(std::chrono::steady_clock::time_point now) {
  std::erase_if(entries_, [&](const auto& entry) { return now - entry.second.arrived > keep_for_; });
}

}  // namespace deepinfer::server
