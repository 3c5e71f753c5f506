// SchemaValidator: three-valued JSON Schema validation (valid / invalid / cannot tell) of
// concrete values, with draft-04 to 2020-12 spellings.
#include "grammar/json_validator.h"

#include <algorithm>
#include <cmath>

#include "grammar/front_ends.h"
#include "grammar/json_schema_compiler.h"

namespace deepinfer::grammar {

namespace {

using Verdict = SchemaValidator::Verdict;

constexpr int kMaxDepth = 200;

Verdict both(Verdict a, Verdict b) {
  if (a == Verdict::kInvalid || b == Verdict::kInvalid) return Verdict::kInvalid;
  return a == Verdict::kUnknown || b == Verdict::kUnknown ? Verdict::kUnknown : Verdict::kValid;
}

Verdict negate(Verdict a) {
  if (a == Verdict::kUnknown) return a;
  return a == Verdict::kValid ? Verdict::kInvalid : Verdict::kValid;
}

Verdict verdict(bool valid) { return valid ? Verdict::kValid : Verdict::kInvalid; }

bool is_integer(const Json& v) {
  if (v.is_number_integer() || v.is_number_unsigned()) return true;
  return v.is_number_float() && std::isfinite(v.get<double>()) && std::floor(v.get<double>()) == v.get<double>();
}

bool has_type(const Json& v, const std::string& type) {
  if (type == "null") return v.is_null();
  if (type == "boolean") return v.is_boolean();
  if (type == "string") return v.is_string();
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "number") return v.is_number();
  return type == "integer" && is_integer(v);
}

size_t num_codepoints(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// A pattern's NFA, ~27 states per `.` (its UTF-8 forms): `.{0,1500}` fits. A match costs up to
// text length x states, and the compile's deadline bounds the sum.
constexpr size_t kMaxPatternStates = 50'000;

Result<Nfa> pattern_nfa(const std::string& pattern, const GrammarLimits& limits) {
  auto grammar = compile_regex_search(pattern, limits);
  if (!grammar.ok()) return grammar.error();
  auto nfa = Nfa::build(*grammar, kMaxPatternStates);
  if (!nfa.ok()) return Error{"pattern /" + pattern + "/ is too complex to check values against: " + nfa.error().message};
  return nfa;
}

}  // namespace

const Json* resolve_pointer(const Json& root, const std::string& target) {
  if (target.empty() || target[0] != '#') return nullptr;
  const Json* node = &root;
  size_t pos = 1;
  while (pos < target.size()) {
    if (target[pos] != '/') return nullptr;
    const size_t next = std::min(target.find('/', pos + 1), target.size());
    const std::string token = target.substr(pos + 1, next - pos - 1);
    std::string decoded;
    for (size_t i = 0; i < token.size(); ++i) {
      if (token[i] == '~' && i + 1 < token.size()) {
        decoded += token[i + 1] == '1' ? '/' : '~';
        ++i;
      } else if (token[i] == '%' && i + 2 < token.size() && std::isxdigit(static_cast<unsigned char>(token[i + 1])) &&
                 std::isxdigit(static_cast<unsigned char>(token[i + 2]))) {
        decoded += static_cast<char>(std::stoi(token.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        decoded += token[i];
      }
    }
    if (node->is_object() && node->contains(decoded)) {
      node = &(*node)[decoded];
    } else if (node->is_array() && !decoded.empty() && decoded.size() < 10 &&
               decoded.find_first_not_of("0123456789") == std::string::npos && std::stoul(decoded) < node->size()) {
      node = &(*node)[std::stoul(decoded)];
    } else {
      return nullptr;
    }
    pos = next;
  }
  return node;
}

bool json_equal(const Json& a, const Json& b) {
  if (a.is_number() && b.is_number()) {
    if (is_integer(a) && is_integer(b) && !a.is_number_float() && !b.is_number_float()) return a == b;
    return a.get<double>() == b.get<double>();
  }
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!json_equal(a[i], b[i])) return false;
    }
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (const auto& [key, value] : a.items()) {
      if (!b.contains(key) || !json_equal(value, b[key])) return false;
    }
    return true;
  }
  return a == b;
}

Verdict SchemaValidator::give_up(const std::string& what, const std::string& pointer) {
  if (unknown_.empty()) unknown_ = what + " at '#" + pointer + "'";
  return Verdict::kUnknown;
}

Verdict SchemaValidator::validate(const Json& schema, const Json& value, const std::string& pointer) {
  unknown_.clear();
  return check(schema, value, pointer, 0);
}

Result<bool> SchemaValidator::search(const std::string& pattern, const std::string& text) {
  auto found = patterns_.find(pattern);
  if (found == patterns_.end()) found = patterns_.emplace(pattern, pattern_nfa(pattern, limits_)).first;
  if (!found->second.ok()) return found->second.error();
  return found->second.value().match(text, limits_);
}

Verdict SchemaValidator::check(const Json& s, const Json& v, const std::string& pointer, int depth) {
  if (depth > kMaxDepth) return give_up("schema nested deeper than " + std::to_string(kMaxDepth), pointer);
  if (s.is_boolean()) return verdict(s.get<bool>());
  if (!s.is_object()) return give_up("a schema that is not an object", pointer);
  Verdict result = Verdict::kValid;
  auto sub = [&](const char* key, size_t i) { return pointer + "/" + key + "/" + std::to_string(i); };
  for (const auto& [key, value] : s.items()) {
    if (result == Verdict::kInvalid) return result;
    const std::string at = pointer + "/" + escape_pointer(key);
    if (key == "$ref") {
      const Json* target = value.is_string() ? resolve_pointer(root_, value.get<std::string>()) : nullptr;
      result = both(result, target ? check(*target, v, value.get<std::string>().substr(1), depth + 1)
                                   : give_up("unresolvable '$ref'", at));
    } else if (key == "type") {
      bool any = false;
      if (value.is_string()) any = has_type(v, value.get<std::string>());
      for (const auto& t : value.is_array() ? value : Json::array()) any |= t.is_string() && has_type(v, t.get<std::string>());
      result = both(result, verdict(any));
    } else if (key == "enum") {
      bool any = false;
      for (const auto& e : value.is_array() ? value : Json::array()) {
        if (json_equal(e, v)) {
          any = true;
          break;
        }
      }
      result = both(result, verdict(any));
    } else if (key == "const") {
      result = both(result, verdict(json_equal(value, v)));
    } else if (key == "not") {
      result = both(result, negate(check(value, v, at, depth + 1)));
    } else if ((key == "allOf" || key == "anyOf" || key == "oneOf") && value.is_array()) {
      int num_valid = 0, num_unknown = 0;
      for (size_t i = 0; i < value.size(); ++i) {
        const Verdict r = check(value[i], v, sub(key.c_str(), i), depth + 1);
        num_valid += r == Verdict::kValid;
        num_unknown += r == Verdict::kUnknown;
      }
      const int n = static_cast<int>(value.size());
      Verdict r = Verdict::kUnknown;
      if (key == "allOf") r = num_valid == n ? Verdict::kValid : num_valid + num_unknown == n ? r : Verdict::kInvalid;
      if (key == "anyOf") r = num_valid > 0 ? Verdict::kValid : num_unknown > 0 ? r : Verdict::kInvalid;
      if (key == "oneOf") r = num_valid > 1 || num_valid + num_unknown == 0 ? Verdict::kInvalid : num_unknown ? r : Verdict::kValid;
      result = both(result, r);
    } else if (key == "if") {
      const Verdict condition = check(value, v, at, depth + 1);
      if (condition == Verdict::kUnknown) {
        result = both(result, condition);
      } else {
        const char* branch = condition == Verdict::kValid ? "then" : "else";
        if (s.contains(branch)) result = both(result, check(s[branch], v, pointer + "/" + branch, depth + 1));
      }
    } else if (key == "$dynamicRef" || key == "$recursiveRef" || key == "unevaluatedProperties" ||
               key == "unevaluatedItems") {
      result = both(result, give_up("keyword '" + key + "'", at));
    }
  }
  if (result == Verdict::kInvalid) return result;
  if (v.is_object()) return both(result, check_object(s, v, pointer, depth));
  if (v.is_array()) return both(result, check_array(s, v, pointer, depth));
  if (v.is_string()) return both(result, check_string(s, v.get<std::string>(), pointer));
  if (v.is_number()) return both(result, check_number(s, v, pointer));
  return result;
}

Verdict SchemaValidator::check_object(const Json& s, const Json& v, const std::string& pointer, int depth) {
  Verdict result = Verdict::kValid;
  const Json* properties = s.contains("properties") && s["properties"].is_object() ? &s["properties"] : nullptr;
  const Json* patterns =
      s.contains("patternProperties") && s["patternProperties"].is_object() ? &s["patternProperties"] : nullptr;
  static const Json kNoPatterns = Json::object();
  for (const auto& [key, member] : v.items()) {
    bool covered = false;
    if (properties && properties->contains(key)) {
      covered = true;
      result = both(result, check((*properties)[key], member, pointer + "/properties/" + escape_pointer(key), depth + 1));
    }
    for (const auto& [pattern, schema] : (patterns ? *patterns : kNoPatterns).items()) {
      const std::string at = pointer + "/patternProperties/" + escape_pointer(pattern);
      const auto hit = search(pattern, key);
      if (!hit.ok()) return give_up(hit.error().message, at);
      if (*hit) {
        covered = true;
        result = both(result, check(schema, member, at, depth + 1));
      }
    }
    if (!covered && s.contains("additionalProperties")) {
      result = both(result, check(s["additionalProperties"], member, pointer + "/additionalProperties", depth + 1));
    }
    if (s.contains("propertyNames")) {
      result = both(result, check(s["propertyNames"], Json(key), pointer + "/propertyNames", depth + 1));
    }
    if (result == Verdict::kInvalid) return result;
  }
  for (const auto& name : s.contains("required") && s["required"].is_array() ? s["required"] : Json::array()) {
    if (name.is_string() && !v.contains(name.get<std::string>())) return Verdict::kInvalid;
  }
  const auto count = static_cast<double>(v.size());
  if (s.contains("minProperties") && s["minProperties"].is_number() && count < s["minProperties"].get<double>()) {
    return Verdict::kInvalid;
  }
  if (s.contains("maxProperties") && s["maxProperties"].is_number() && count > s["maxProperties"].get<double>()) {
    return Verdict::kInvalid;
  }
  for (const char* keyword : {"dependencies", "dependentRequired", "dependentSchemas"}) {
    if (!s.contains(keyword) || !s[keyword].is_object()) continue;
    for (const auto& [trigger, dependency] : s[keyword].items()) {
      if (!v.contains(trigger)) continue;
      if (dependency.is_array()) {
        for (const auto& name : dependency) {
          if (name.is_string() && !v.contains(name.get<std::string>())) return Verdict::kInvalid;
        }
      } else {
        result = both(result, check(dependency, v, pointer + "/" + keyword + "/" + escape_pointer(trigger), depth + 1));
      }
    }
  }
  return result;
}

Verdict SchemaValidator::check_array(const Json& s, const Json& v, const std::string& pointer, int depth) {
  Verdict result = Verdict::kValid;
  size_t num_prefix = 0;
  const Json* prefix = nullptr;
  const Json* rest = nullptr;
  std::string rest_key = "items";
  if (s.contains("prefixItems") && s["prefixItems"].is_array()) {
    prefix = &s["prefixItems"];
    if (s.contains("items")) rest = &s["items"];
  } else if (s.contains("items") && s["items"].is_array()) {
    prefix = &s["items"];
    if (s.contains("additionalItems")) rest = &s["additionalItems"], rest_key = "additionalItems";
  } else if (s.contains("items")) {
    rest = &s["items"];
  }
  if (prefix) num_prefix = prefix->size();
  for (size_t i = 0; i < v.size() && result != Verdict::kInvalid; ++i) {
    if (i < num_prefix) {
      result = both(result, check((*prefix)[i], v[i], pointer + "/items/" + std::to_string(i), depth + 1));
    } else if (rest) {
      result = both(result, check(*rest, v[i], pointer + "/" + rest_key, depth + 1));
    }
  }
  const auto count = static_cast<double>(v.size());
  if (s.contains("minItems") && s["minItems"].is_number() && count < s["minItems"].get<double>()) return Verdict::kInvalid;
  if (s.contains("maxItems") && s["maxItems"].is_number() && count > s["maxItems"].get<double>()) return Verdict::kInvalid;
  if (s.contains("uniqueItems") && s["uniqueItems"] == Json(true)) {
    for (size_t i = 0; i < v.size(); ++i) {
      for (size_t j = i + 1; j < v.size(); ++j) {
        if (json_equal(v[i], v[j])) return Verdict::kInvalid;
      }
    }
  }
  if (s.contains("contains")) {
    double matches = 0;
    for (const auto& item : v) {
      const Verdict r = check(s["contains"], item, pointer + "/contains", depth + 1);
      if (r == Verdict::kUnknown) return r;
      matches += r == Verdict::kValid;
    }
    const double lo = s.contains("minContains") && s["minContains"].is_number() ? s["minContains"].get<double>() : 1;
    const bool too_many = s.contains("maxContains") && s["maxContains"].is_number() && matches > s["maxContains"].get<double>();
    if (matches < lo || too_many) return Verdict::kInvalid;
  }
  return result;
}

Verdict SchemaValidator::check_string(const Json& s, const std::string& text, const std::string& pointer) {
  const auto length = static_cast<double>(num_codepoints(text));
  if (s.contains("minLength") && s["minLength"].is_number() && length < s["minLength"].get<double>()) {
    return Verdict::kInvalid;
  }
  if (s.contains("maxLength") && s["maxLength"].is_number() && length > s["maxLength"].get<double>()) {
    return Verdict::kInvalid;
  }
  std::vector<std::pair<std::string, std::string>> patterns;
  if (s.contains("pattern") && s["pattern"].is_string()) patterns.emplace_back(s["pattern"].get<std::string>(), "pattern");
  if (s.contains("format") && s["format"].is_string()) {
    const auto found = json_format_patterns().find(s["format"].get<std::string>());
    if (found == json_format_patterns().end()) return give_up("format '" + s["format"].get<std::string>() + "'", pointer + "/format");
    patterns.emplace_back(found->second, "format");
  }
  for (const auto& [pattern, key] : patterns) {
    const auto hit = search(pattern, text);
    if (!hit.ok()) return give_up(hit.error().message, pointer + "/" + key);
    if (!*hit) return Verdict::kInvalid;
  }
  return Verdict::kValid;
}

Verdict SchemaValidator::check_number(const Json& s, const Json& v, const std::string& pointer) {
  const double x = v.get<double>();
  auto number = [&](const char* key) -> std::optional<double> {
    if (!s.contains(key) || !s[key].is_number()) return std::nullopt;
    return s[key].get<double>();
  };
  const bool draft4_min = s.contains("exclusiveMinimum") && s["exclusiveMinimum"] == Json(true);
  const bool draft4_max = s.contains("exclusiveMaximum") && s["exclusiveMaximum"] == Json(true);
  if (auto lo = number("minimum"); lo && (x < *lo || (draft4_min && x == *lo))) return Verdict::kInvalid;
  if (auto hi = number("maximum"); hi && (x > *hi || (draft4_max && x == *hi))) return Verdict::kInvalid;
  if (auto lo = number("exclusiveMinimum"); lo && x <= *lo) return Verdict::kInvalid;
  if (auto hi = number("exclusiveMaximum"); hi && x >= *hi) return Verdict::kInvalid;
  if (auto step = number("multipleOf")) {
    if (*step <= 0) return give_up("'multipleOf' that is not positive", pointer + "/multipleOf");
    const double q = x / *step;
    if (std::abs(q - std::round(q)) > 1e-9 * std::max(1.0, std::abs(q))) return Verdict::kInvalid;
  }
  return Verdict::kValid;
}

}  // namespace deepinfer::grammar
