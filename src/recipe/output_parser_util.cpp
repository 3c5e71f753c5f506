// Marker search with hold-back, and incremental JSON tool-call reading.
#include "recipe/output_parser_util.h"

#include <functional>
#include <nlohmann/json.hpp>

#include "core/json_nesting.h"

namespace deepinfer::output_parser {

std::optional<MarkerHit> find_marker(std::string_view text, const std::vector<std::string_view>& markers,
                                     bool hold_newlines, size_t* safe) {
  std::optional<MarkerHit> best;
  for (size_t i = 0; i < markers.size(); ++i) {
    const size_t pos = text.find(markers[i]);
    if (pos == std::string_view::npos) continue;
    if (!best || pos < best->begin || (pos == best->begin && markers[i].size() > best->end - best->begin)) {
      best = MarkerHit{pos, pos + markers[i].size(), i};
    }
  }
  if (best) {
    if (hold_newlines) {
      while (best->begin > 0 && text[best->begin - 1] == '\n') --best->begin;
    }
    return best;
  }
  size_t keep_from = text.size();
  for (const std::string_view marker : markers) {
    const size_t longest = std::min(marker.size() - 1, text.size());
    for (size_t k = longest; k > 0; --k) {
      if (text.substr(text.size() - k) == marker.substr(0, k)) {
        keep_from = std::min(keep_from, text.size() - k);
        break;
      }
    }
  }
  if (hold_newlines) {
    while (keep_from > 0 && text[keep_from - 1] == '\n') --keep_from;
  }
  *safe = keep_from;
  return std::nullopt;
}

std::string JsonValueScanner::feed(std::string_view text) {
  std::string taken;
  for (const char c : text) {
    if (done_) break;
    if (!started_) {
      if (c == ' ' || c == '\n' || c == '\t' || c == '\r') continue;
      started_ = true;
      taken += c;
      if (c == '{' || c == '[') {
        depth_ = 1;
      } else if (c == '"') {
        in_string_ = true;
      } else {
        scalar_ = true;
      }
      continue;
    }
    if (scalar_) {
      if (c == ',' || c == '}' || c == ']' || c == ' ' || c == '\n' || c == '\t' || c == '\r') {
        done_ = true;
        break;
      }
      taken += c;
      continue;
    }
    taken += c;
    if (in_string_) {
      if (escape_) {
        escape_ = false;
      } else if (c == '\\') {
        escape_ = true;
      } else if (c == '"') {
        in_string_ = false;
        if (depth_ == 0) done_ = true;
      }
      continue;
    }
    if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if (c == '}' || c == ']') {
      if (--depth_ == 0) done_ = true;
    }
  }
  return taken;
}

namespace {

// Reads a JSON string starting at body[*pos] == '"'; nullopt when body ends first. *bad is set
// when it is not a string at all.
std::optional<std::string> read_string(std::string_view body, size_t* pos, bool* bad) {
  if (*pos >= body.size()) return std::nullopt;
  if (body[*pos] != '"') {
    *bad = true;
    return std::nullopt;
  }
  for (size_t i = *pos + 1; i < body.size(); ++i) {
    if (body[i] == '\\') {
      ++i;
      continue;
    }
    if (body[i] == '"') {
      const std::string_view quoted = body.substr(*pos, i + 1 - *pos);
      *pos = i + 1;
      try {
        return nlohmann::json::parse(quoted).get<std::string>();
      } catch (const nlohmann::json::exception&) {
        *bad = true;
        return std::nullopt;
      }
    }
  }
  return std::nullopt;
}

void skip_space(std::string_view body, size_t* pos) {
  while (*pos < body.size() && (body[*pos] == ' ' || body[*pos] == '\n' || body[*pos] == '\t' || body[*pos] == '\r')) {
    ++*pos;
  }
}

}  // namespace

CallPrefix match_call_prefix(std::string_view body) {
  CallPrefix result;
  size_t pos = 0;
  bool bad = false;
  const auto expect = [&](char c) -> CallPrefixMatch {
    skip_space(body, &pos);
    if (pos >= body.size()) return CallPrefixMatch::kNeedMore;
    if (body[pos] != c) return CallPrefixMatch::kMismatch;
    ++pos;
    return CallPrefixMatch::kMatched;
  };
  const auto key = [&](std::string* out) -> CallPrefixMatch {
    skip_space(body, &pos);
    auto text = read_string(body, &pos, &bad);
    if (bad) return CallPrefixMatch::kMismatch;
    if (!text) return CallPrefixMatch::kNeedMore;
    *out = std::move(*text);
    return CallPrefixMatch::kMatched;
  };
  std::string name_key;
  std::string args_key;
  for (const auto& step : std::vector<std::function<CallPrefixMatch()>>{
           [&] { return expect('{'); }, [&] { return key(&name_key); },
           [&] { return name_key == "name" ? CallPrefixMatch::kMatched : CallPrefixMatch::kMismatch; },
           [&] { return expect(':'); }, [&] { return key(&result.name); }, [&] { return expect(','); },
           [&] { return key(&args_key); },
           [&] {
             return args_key == "arguments" || args_key == "parameters" ? CallPrefixMatch::kMatched
                                                                         : CallPrefixMatch::kMismatch;
           },
           [&] { return expect(':'); }}) {
    const CallPrefixMatch m = step();
    if (m != CallPrefixMatch::kMatched) {
      result.match = m;
      return result;
    }
  }
  result.match = CallPrefixMatch::kMatched;
  result.consumed = pos;
  return result;
}

std::optional<WholeCall> parse_whole_call(std::string_view body) {
  if (json_nesting_depth(body) > kMaxJsonNesting) return std::nullopt;
  nlohmann::ordered_json call;
  try {
    call = nlohmann::ordered_json::parse(body);
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
  if (!call.is_object()) return std::nullopt;
  const auto name = call.find("name");
  if (name == call.end() || !name->is_string()) return std::nullopt;
  auto arguments = call.find("arguments");
  if (arguments == call.end()) arguments = call.find("parameters");
  if (arguments == call.end()) return std::nullopt;
  WholeCall whole{name->get<std::string>(), ""};
  whole.arguments = arguments->is_string() ? arguments->get<std::string>() : arguments->dump();
  return whole;
}

}  // namespace deepinfer::output_parser
