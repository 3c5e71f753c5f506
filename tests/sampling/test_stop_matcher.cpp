// StopMatcher: every case fed split at every position (and every pair of positions) must give
// what a search over the whole text gives, and must never emit text it later has to take back.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sampling/stop_matcher.h"

namespace deepinfer {
namespace {

struct Expected {
  std::string text;
  std::string stop_str;  // empty: no stop
};

// The oracle over the complete text: the stop string whose first occurrence ends earliest
// (the longest at equal ends); the output ends before it, or after it when included.
Expected whole_text_answer(const std::string& text, const std::vector<std::string>& stops, bool include) {
  for (size_t end = 1; end <= text.size(); ++end) {
    std::string best;
    for (const std::string& stop : stops) {
      if (stop.size() <= end && text.compare(end - stop.size(), stop.size(), stop) == 0 && stop.size() > best.size()) {
        best = stop;
      }
    }
    if (!best.empty()) return {text.substr(0, include ? end : end - best.size()), best};
  }
  return {text, ""};
}

bool is_proper_prefix_of_a_stop(const std::string& held, const std::vector<std::string>& stops) {
  if (held.empty()) return true;
  for (const std::string& stop : stops) {
    if (stop.size() > held.size() && stop.compare(0, held.size(), held) == 0) return true;
  }
  return false;
}

// Feeds the pieces; checks each step against the oracle and returns the total output.
Expected feed(const std::vector<std::string>& pieces, const std::vector<std::string>& stops, bool include,
              const Expected& expected) {
  StopMatcher matcher(stops, include);
  Expected got;
  std::string fed;
  for (const std::string& piece : pieces) {
    fed += piece;
    const StopMatcher::Output out = matcher.push(piece);
    got.text += out.text;
    EXPECT_EQ(expected.text.compare(0, got.text.size(), got.text), 0) << "emitted beyond the answer: " << got.text;
    if (out.stopped) {
      EXPECT_TRUE(got.stop_str.empty() || got.stop_str == out.stop_str);
      got.stop_str = out.stop_str;
    } else if (got.stop_str.empty()) {
      EXPECT_TRUE(out.stop_str.empty());
      // Only a possible start of a stop string is held back.
      const std::string held = fed.substr(got.text.size());
      EXPECT_TRUE(include ? held.empty() : is_proper_prefix_of_a_stop(held, stops)) << "held '" << held << "'";
    }
  }
  got.text += matcher.finish();
  EXPECT_EQ(matcher.stopped(), !got.stop_str.empty());
  return got;
}

void check_every_split(const std::string& text, const std::vector<std::string>& stops, bool include,
                       const Expected& hand_answer) {
  const Expected expected = whole_text_answer(text, stops, include);
  ASSERT_EQ(expected.text, hand_answer.text) << "the oracle disagrees with the hand-worked answer";
  ASSERT_EQ(expected.stop_str, hand_answer.stop_str);
  for (size_t i = 0; i <= text.size(); ++i) {
    for (size_t j = i; j <= text.size(); ++j) {
      const Expected got = feed({text.substr(0, i), text.substr(i, j - i), text.substr(j)}, stops, include, expected);
      ASSERT_EQ(got.text, expected.text) << "split at " << i << ", " << j;
      ASSERT_EQ(got.stop_str, expected.stop_str) << "split at " << i << ", " << j;
    }
  }
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  const Expected got = feed(bytes, stops, include, expected);
  EXPECT_EQ(got.text, expected.text);
  EXPECT_EQ(got.stop_str, expected.stop_str);
}

struct Case {
  std::string text;
  std::vector<std::string> stops;
  Expected excluded;  // hand-worked, include_stop_str_in_output = false
  Expected included;  // and true
};

TEST(StopMatcher, EverySplitGivesTheWholeTextAnswer) {
  const std::vector<Case> cases = {
      {"The answer is 42.\nQ: next", {"\nQ:"}, {"The answer is 42.", "\nQ:"}, {"The answer is 42.\nQ:", "\nQ:"}},
      {"no stop in here", {"stop!", "zz"}, {"no stop in here", ""}, {"no stop in here", ""}},
      // Ends with a stop's prefix that never completes: released by finish().
      {"almost sto", {"stop"}, {"almost sto", ""}, {"almost sto", ""}},
      // A partial match that fails, then a real one that overlaps it.
      {"aaab", {"aab"}, {"a", "aab"}, {"aaab", "aab"}},
      {"abcabd", {"abd", "abe"}, {"abc", "abd"}, {"abcabd", "abd"}},
      // The stop that ends first wins even if another starts earlier.
      {"xabcde", {"abcd", "bc"}, {"xa", "bc"}, {"xabc", "bc"}},
      // Equal ends: the longer stop string.
      {"xab!", {"b", "ab"}, {"x", "ab"}, {"xab", "ab"}},
      {"STOP and more", {"STOP"}, {"", "STOP"}, {"STOP", "STOP"}},
      {"text after the stop <|end|> is dropped <|end|>", {"<|end|>"}, {"text after the stop ", "<|end|>"},
       {"text after the stop <|end|>", "<|end|>"}},
      // UTF-8: matching is by bytes, and a stop string starts on a character boundary.
      {"naïve café! après", {"é!"}, {"naïve caf", "é!"}, {"naïve café!", "é!"}},
      {"ab", {}, {"ab", ""}, {"ab", ""}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    check_every_split(c.text, c.stops, false, c.excluded);
    check_every_split(c.text, c.stops, true, c.included);
  }
}

TEST(StopMatcher, NothingAfterAStop) {
  StopMatcher matcher({"###"}, false);
  const StopMatcher::Output first = matcher.push("one ##");
  EXPECT_EQ(first.text, "one ");
  EXPECT_FALSE(first.stopped);
  const StopMatcher::Output second = matcher.push("# two");
  EXPECT_EQ(second.text, "");
  EXPECT_TRUE(second.stopped);
  EXPECT_EQ(second.stop_str, "###");
  const StopMatcher::Output third = matcher.push("three");
  EXPECT_EQ(third.text, "");
  EXPECT_TRUE(third.stopped);
  EXPECT_EQ(matcher.finish(), "");
}

TEST(StopMatcher, FinishReleasesTheHeldTail) {
  StopMatcher matcher({"</s>"}, false);
  EXPECT_EQ(matcher.push("end </").text, "end ");
  EXPECT_EQ(matcher.finish(), "</");
}

}  // namespace
}  // namespace deepinfer
