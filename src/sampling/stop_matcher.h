// StopMatcher: finds the request's stop strings in the streamed output text. The engine feeds
// it each increment of detokenized text and emits only what it returns, so a stop string split
// across tokens is caught and, unless include_stop_str_in_output, never shown. Not thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer {

class StopMatcher {
 public:
  struct Output {
    std::string text;      // safe to emit now
    bool stopped = false;  // a stop string was found; nothing after it is ever emitted
    std::string stop_str;  // the stop string found (empty when not stopped)
  };

  // stop_strings must be non-empty strings (SamplingParams::validate checks that).
  StopMatcher(std::vector<std::string> stop_strings, bool include_stop_str_in_output);

  // Takes the next piece of output text. The stop is the string whose first occurrence ends
  // earliest in the whole text (the longest one if several end there), so the result does not
  // depend on how the text is split. Until a stop, the text is emitted except the longest tail
  // that could begin a stop string (none is held back when include_stop_str_in_output, since the
  // stop string would be emitted anyway). After a stop, returns no text and the same stop_str.
  Output push(std::string_view text);

  // Generation ended for another reason (eos, length): returns the held-back tail.
  std::string finish();

  bool stopped() const { return stopped_; }

 private:
  // Length of the longest suffix of text that is a proper prefix of a stop string.
  size_t partial_match_length(std::string_view text) const;

  std::vector<std::string> stop_strings_;
  bool include_stop_str_;
  size_t max_stop_length_ = 0;
  // The longest suffix of the text so far that could begin a stop string; already emitted when
  // include_stop_str_, held back otherwise.
  std::string tail_;
  bool stopped_ = false;
  std::string stop_str_;
};

}  // namespace deepinfer
