// Pieces the output parsers share: marker search with hold-back of a possible marker prefix, and
// incremental reading of a JSON tool call ({"name": ..., "arguments": ...}).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "recipe/output_parser.h"

namespace deepinfer::output_parser {

// GPT-OSS harmony: <|channel|>analysis / final / commentary messages, calls addressed with
// to=functions.NAME (output_parser_harmony.cpp).
std::unique_ptr<OutputParser> make_harmony_parser(const OutputParsing& parsing);

struct MarkerHit {
  size_t begin = 0;   // where the marker starts (before its leading newlines when they are held)
  size_t end = 0;     // one past the marker
  size_t marker = 0;  // index into the marker list
};

// The earliest complete marker in text (the longest on a tie), or nullopt with *safe set to how
// many leading bytes can be released: the rest may be the start of a marker. With
// hold_newlines, a run of newlines before a marker (or at the end) belongs to the marker.
std::optional<MarkerHit> find_marker(std::string_view text, const std::vector<std::string_view>& markers,
                                     bool hold_newlines, size_t* safe);

// Incremental scan of one JSON value: says which characters belong to it and when it ends.
class JsonValueScanner {
 public:
  // The part of text that belongs to the value (leading whitespace dropped); sets done() once
  // the value is complete, after which nothing more is taken.
  std::string feed(std::string_view text);
  bool done() const { return done_; }

 private:
  bool started_ = false;
  bool done_ = false;
  bool in_string_ = false;
  bool escape_ = false;
  bool scalar_ = false;
  int depth_ = 0;
};

// Matching of the opening of a JSON call object: {"name": "<name>", "arguments"|"parameters": .
enum class CallPrefixMatch { kNeedMore, kMatched, kMismatch };
struct CallPrefix {
  CallPrefixMatch match = CallPrefixMatch::kNeedMore;
  std::string name;
  size_t consumed = 0;  // bytes up to and including the ':' after the arguments key
};
CallPrefix match_call_prefix(std::string_view body);

// A whole call object parsed at once (any key order); nullopt unless it has a string "name" and
// an "arguments" or "parameters" value. arguments is the value's JSON text (a string value is
// taken as already being JSON text).
struct WholeCall {
  std::string name;
  std::string arguments;
};
std::optional<WholeCall> parse_whole_call(std::string_view body);

}  // namespace deepinfer::output_parser
