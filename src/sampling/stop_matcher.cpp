// Stop-string matching over streamed text: only a stop string's possible start is held back.
#include "sampling/stop_matcher.h"

#include <algorithm>

#include "core/check.h"

namespace deepinfer {

StopMatcher::StopMatcher(std::vector<std::string> stop_strings, bool include_stop_str_in_output)
    : stop_strings_(std::move(stop_strings)), include_stop_str_(include_stop_str_in_output) {
  for (const std::string& stop : stop_strings_) {
    DI_CHECK(!stop.empty(), "empty stop string");
    max_stop_length_ = std::max(max_stop_length_, stop.size());
  }
}

size_t StopMatcher::partial_match_length(std::string_view text) const {
  const size_t longest = std::min(text.size(), max_stop_length_ - 1);
  for (size_t length = longest; length > 0; --length) {
    const std::string_view suffix = text.substr(text.size() - length);
    for (const std::string& stop : stop_strings_) {
      if (stop.size() > length && std::string_view(stop).starts_with(suffix)) return length;
    }
  }
  return 0;
}

StopMatcher::Output StopMatcher::push(std::string_view text) {
  Output out;
  if (stopped_) {
    out.stopped = true;
    out.stop_str = stop_str_;
    return out;
  }
  if (stop_strings_.empty()) {
    out.text = text;
    return out;
  }
  // tail_ holds no complete stop string, and any occurrence ending in the new text starts
  // inside tail_ + text: an earlier start would make a longer suffix begin a stop string.
  const std::string window = tail_ + std::string(text);
  const size_t already_emitted = include_stop_str_ ? tail_.size() : 0;
  for (size_t end = tail_.size() + 1; end <= window.size(); ++end) {
    const std::string* found = nullptr;
    for (const std::string& stop : stop_strings_) {
      if (stop.size() > end || (found != nullptr && stop.size() <= found->size())) continue;
      if (std::string_view(window).substr(end - stop.size(), stop.size()) == stop) found = &stop;
    }
    if (found == nullptr) continue;
    const size_t emit_end = include_stop_str_ ? end : end - found->size();
    out.text = window.substr(already_emitted, emit_end - already_emitted);
    out.stopped = true;
    out.stop_str = *found;
    stopped_ = true;
    stop_str_ = *found;
    tail_.clear();
    return out;
  }
  const size_t held = partial_match_length(window);
  const size_t emit_end = include_stop_str_ ? window.size() : window.size() - held;
  out.text = window.substr(already_emitted, emit_end - already_emitted);
  tail_ = window.substr(window.size() - held);
  return out;
}

std::string StopMatcher::finish() {
  std::string rest = (stopped_ || include_stop_str_) ? std::string() : std::move(tail_);
  tail_.clear();
  return rest;
}

}  // namespace deepinfer
