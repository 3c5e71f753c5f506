// JSON Schema containers. Objects: properties in the schema's order, required,
// additionalProperties (declared keys excluded), patternProperties, minProperties /
// maxProperties, dependencies / dependentRequired, and keys a `not: {required}` forbids; presence
// constraints are a state machine over the declared properties (next property, count so far,
// which of the properties named by a dependency are present). Arrays: prefixItems / items (and
// draft-07 items + additionalItems), minItems / maxItems.
#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "grammar/json_schema_compiler.h"

namespace deepinfer::grammar {

namespace {

// The names a dependency's schema requires, when it is a plain {"required": [...]}.
std::optional<std::vector<std::string>> required_only(const Json& dependency) {
  if (dependency.is_array()) {
    std::vector<std::string> out;
    for (const auto& name : dependency) {
      if (!name.is_string()) return std::nullopt;
      out.push_back(name.get<std::string>());
    }
    return out;
  }
  if (!dependency.is_object()) return std::nullopt;
  for (const auto& [key, value] : dependency.items()) {
    if (key != "required" && key != "type" && !is_annotation(key)) return std::nullopt;
    if (key == "type" && value != Json("object")) return std::nullopt;
  }
  if (!dependency.contains("required")) return std::vector<std::string>{};
  return required_only(dependency["required"]);
}

int64_t count_keyword(const Json& s, const char* key, int64_t fallback) {
  return s.contains(key) && s[key].is_number() ? static_cast<int64_t>(s[key].get<double>()) : fallback;
}

}  // namespace

// Whether the unanchored pattern finds a match in every string: it matches the empty string
// and no pair of anchors makes that match depend on the text (the front end rejects \b and
// lookarounds).
bool JsonSchemaCompiler::matches_every_string(const std::string& pattern) {
  if (pattern.find('^') != std::string::npos && pattern.find('$') != std::string::npos) return false;
  const auto empty = validator_->search(pattern, "");
  return empty.ok() && *empty;
}

Symbol JsonSchemaCompiler::object(const Json& s, const std::string& pointer, int depth) {
  struct Property {
    std::string name;
    Json schema;
    bool required;
  };
  std::set<std::string> required;
  if (s.contains("required") && s["required"].is_array()) {
    for (const auto& r : s["required"]) {
      if (r.is_string()) required.insert(r.get<std::string>());
    }
  }
  Json patterns = s.contains("patternProperties") && s["patternProperties"].is_object() ? s["patternProperties"]
                                                                                        : Json::object();
  // Strict mode closes objects that declare properties; a bare {"type": "object"} stays open.
  const bool declares = s.contains("properties") || s.contains("required") || !patterns.empty();
  bool explicit_additional = s.contains("additionalProperties");
  Json additional = explicit_additional ? s["additionalProperties"] : Json(!(options_.strict_properties && declares));
  // A key matching a pattern gets that pattern's schema too.
  std::optional<Json> pattern_schema;
  std::string pattern_pointer;
  bool every_key = false;
  for (const auto& [pattern, sub] : patterns.items()) {
    if (pattern_schema && !json_equal(*pattern_schema, sub)) {
      unsupported("'patternProperties' with different schemas per pattern", pointer + "/patternProperties");
      return b_.ok() ? any_object() : 0;
    }
    pattern_schema = sub;
    if (pattern_pointer.empty()) pattern_pointer = pointer + "/patternProperties/" + escape_pointer(pattern);
    every_key |= matches_every_string(pattern);
  }
  if (every_key) {
    // Every key matches: the pattern's schema applies to all properties, and
    // additionalProperties to none.
    additional = *pattern_schema;
    explicit_additional = true;
    patterns = Json::object();
  }
  const bool closed = additional == Json(false);
  std::vector<Property> props;
  if (s.contains("properties") && s["properties"].is_object()) {
    for (const auto& [name, sub] : s["properties"].items()) {
      const Json schema = every_key ? Json{{"allOf", Json::array({sub, *pattern_schema})}} : sub;
      props.push_back({name, schema, required.count(name) > 0});
    }
  }
  auto declared = [&](const std::string& name) {
    return std::any_of(props.begin(), props.end(), [&](const Property& p) { return p.name == name; });
  };
  if (!patterns.empty() && !closed) {
    unsupported("'patternProperties' next to an 'additionalProperties' that allows keys", pointer + "/patternProperties");
    return b_.ok() ? any_object() : 0;
  }
  auto matches_pattern = [&](const std::string& name) -> Result<bool> {
    for (const auto& [pattern, sub] : patterns.items()) {
      auto hit = validator_->search(pattern, name);
      if (!hit.ok() || *hit) return hit;
    }
    return false;
  };
  // Names that appear nowhere among the declared properties: from required (and dependencies
  // below) they become optional declared properties when some extra key could spell them.
  auto add_undeclared = [&](const std::string& name, bool is_required) {
    if (declared(name)) return true;
    if (!patterns.empty()) {
      unsupported("'patternProperties' together with property '" + name + "' named only by 'required'/'dependencies'",
                  pointer + "/patternProperties");
      return false;
    }
    if (explicit_additional && closed) {
      if (!is_required) return true;  // it can never be present
      b_.fail("required property '" + name + "' at '#" + pointer + "' is not allowed by additionalProperties");
      return false;
    }
    props.push_back({name, additional.is_object() ? additional : Json(true), is_required});
    return true;
  };
  for (const auto& name : required) {
    if (!add_undeclared(name, true)) return 0;
  }
  // Presence constraints: dependencies (trigger -> names it needs) and forbidden keys.
  std::map<std::string, std::vector<std::string>> dependencies;
  for (const char* keyword : {"dependencies", "dependentRequired", "dependentSchemas"}) {
    if (!s.contains(keyword) || !s[keyword].is_object()) continue;
    for (const auto& [trigger, dependency] : s[keyword].items()) {
      const auto names = required_only(dependency);
      if (!names) {
        unsupported("'" + std::string(keyword) + "' whose schema is more than 'required'",
                    pointer + "/" + keyword + "/" + escape_pointer(trigger));
        if (!b_.ok()) return 0;
        continue;
      }
      for (const auto& name : *names) {
        if (!add_undeclared(name, false)) return 0;
      }
      if (!names->empty() && !add_undeclared(trigger, false)) return 0;
      auto& list = dependencies[trigger];
      list.insert(list.end(), names->begin(), names->end());
    }
  }
  std::set<std::string> forbidden;
  if (s.contains(kForbiddenKeys)) {
    for (const auto& name : s[kForbiddenKeys]) forbidden.insert(name.get<std::string>());
  }
  for (const auto& [trigger, names] : dependencies) {
    for (const auto& name : names) {
      if (!declared(name)) forbidden.insert(trigger);  // what it needs can never be present
    }
  }
  std::vector<std::string> names;
  for (const auto& p : props) names.push_back(p.name);
  for (const auto& name : forbidden) {
    if (required.count(name)) {
      b_.fail("object at '#" + pointer + "' requires property '" + name + "' that its constraints forbid");
      return 0;
    }
    if (!declared(name)) names.push_back(name);
  }
  for (const auto& name : names) {
    const auto hit = matches_pattern(name);
    if (!hit.ok() || *hit) {
      unsupported(hit.ok() ? "'patternProperties' whose pattern matches declared property '" + name + "'"
                           : "'patternProperties' pattern that cannot be checked against property '" + name +
                                 "' (" + hit.error().message + ")",
                  pointer + "/patternProperties");
      return b_.ok() ? any_object() : 0;
    }
  }
  const int64_t min_count = count_keyword(s, "minProperties", 0);
  const int64_t max_count = count_keyword(s, "maxProperties", -1);
  const Symbol sep = b_.group({{ws(), b_.byte(','), ws()}});
  const Symbol colon = b_.group({{ws(), b_.byte(':'), ws()}});
  std::vector<Symbol> kv;
  for (const auto& p : props) {
    const Symbol value = schema(p.schema, pointer + "/properties/" + escape_pointer(p.name), depth + 1);
    kv.push_back(b_.group({{literal_value(Json(p.name)), colon, value}}));
  }
  std::optional<Symbol> extra;
  if (!patterns.empty()) {
    std::vector<Sequence> keys;
    for (const auto& [pattern, sub] : patterns.items()) {
      auto body = build_regex(b_, pattern.c_str(), true);
      if (!body.ok()) {
        b_.fail(body.error().message + " at '#" + pointer + "/patternProperties'");
        return 0;
      }
      keys.push_back({quoted(*body)});
    }
    const Symbol value = schema(*pattern_schema, pattern_pointer, depth + 1);
    extra = b_.group({{b_.group(std::move(keys)), colon, value}});
  } else if (!closed) {
    const Symbol value = schema(additional, pointer + "/additionalProperties", depth + 1);
    extra = b_.group({{string_excluding(names), colon, value}});
  }
  if (!b_.ok()) return 0;
  // Properties a dependency names get a presence bit.
  std::map<std::string, int> bit;
  for (const auto& [trigger, needed] : dependencies) {
    for (const auto& name : needed) bit.emplace(name, 0);
    bit.emplace(trigger, 0);
  }
  if (bit.size() > 12) {
    unsupported("'dependencies' over more than 12 properties", pointer + "/dependencies");
    if (!b_.ok()) return 0;
    dependencies.clear(), bit.clear();
  }
  int next_bit = 0;
  for (auto& [name, b] : bit) b = next_bit++;
  const int64_t cap = std::max<int64_t>({1, min_count, max_count + 1});
  const size_t n = props.size();
  std::map<std::tuple<size_t, int64_t, uint32_t>, std::optional<Symbol>> memo;
  // rest(i, count, present): properties i.. after count written (capped at cap); nullopt when
  // no completion satisfies the constraints.
  std::function<std::optional<Symbol>(size_t, int64_t, uint32_t)> rest = [&](size_t i, int64_t count,
                                                                              uint32_t present) -> std::optional<Symbol> {
    const auto key = std::make_tuple(i, count, present);
    if (auto found = memo.find(key); found != memo.end()) return found->second;
    std::vector<Sequence> alts;
    if (i == n) {
      bool satisfied = true;
      for (const auto& [trigger, needed] : dependencies) {
        if (!(present >> bit[trigger] & 1)) continue;
        for (const auto& name : needed) satisfied &= (present >> bit[name] & 1) != 0;
      }
      const int64_t lo = std::max<int64_t>(0, min_count - count);
      const int64_t hi = max_count < 0 ? -1 : max_count - count;
      if (max_count >= 0 && count > max_count) satisfied = false;
      if (satisfied && lo == 0) alts.push_back({});
      if (satisfied && extra && hi != 0) {
        Sequence one = count > 0 ? Sequence{sep, *extra} : Sequence{*extra};
        one.push_back(b_.repeat(b_.group({{sep, *extra}}), std::max<int64_t>(0, lo - 1), hi < 0 ? -1 : hi - 1));
        alts.push_back(std::move(one));
      }
    } else {
      const Property& p = props[i];
      if (!forbidden.count(p.name)) {
        const auto found = bit.find(p.name);
        const uint32_t now = found == bit.end() ? present : present | (1u << found->second);
        if (auto tail = rest(i + 1, std::min(count + 1, cap), now)) {
          alts.push_back(count > 0 ? Sequence{sep, kv[i], *tail} : Sequence{kv[i], *tail});
        }
      }
      if (!p.required) {
        if (auto tail = rest(i + 1, count, present)) alts.push_back({*tail});
      }
    }
    std::optional<Symbol> out;
    if (!alts.empty()) out = b_.group(std::move(alts));
    memo[key] = out;
    return out;
  };
  const auto body = rest(0, 0, 0);
  if (!b_.ok()) return 0;
  if (!body) {
    b_.fail("object at '#" + pointer + "' cannot satisfy its property constraints");
    return 0;
  }
  return b_.group({{b_.byte('{'), ws(), *body, ws(), b_.byte('}')}});
}

Symbol JsonSchemaCompiler::array(const Json& s, const std::string& pointer, int depth) {
  static const Json kTrue = true;
  std::vector<const Json*> prefix;
  std::string prefix_key;
  const Json* rest = &kTrue;
  std::string rest_pointer = pointer + "/items";
  if (s.contains("prefixItems") && s["prefixItems"].is_array()) {
    prefix_key = "/prefixItems/";
    for (const auto& p : s["prefixItems"]) prefix.push_back(&p);
    if (s.contains("items")) rest = &s["items"];
  } else if (s.contains("items") && s["items"].is_array()) {
    prefix_key = "/items/";
    for (const auto& p : s["items"]) prefix.push_back(&p);
    rest_pointer = pointer + "/additionalItems";
    if (s.contains("additionalItems")) rest = &s["additionalItems"];
  } else if (s.contains("items")) {
    rest = &s["items"];
  }
  const int64_t min = s.contains("minItems") && s["minItems"].is_number() ? s["minItems"].get<int64_t>() : 0;
  const int64_t max = s.contains("maxItems") && s["maxItems"].is_number() ? s["maxItems"].get<int64_t>() : -1;
  const auto k = static_cast<int64_t>(prefix.size());
  const bool has_rest = *rest != Json(false);
  if ((max >= 0 && min > max) || (!has_rest && min > k)) {
    b_.fail("array at '#" + pointer + "' cannot satisfy minItems " + std::to_string(min));
    return 0;
  }
  const Symbol sep = b_.group({{ws(), b_.byte(','), ws()}});
  // tail: the elements after the prefix.
  Sequence tail;
  const int64_t lo = std::max<int64_t>(0, min - k);
  const int64_t hi = max < 0 ? -1 : std::max<int64_t>(0, max - k);
  if (has_rest && hi != 0) {
    const Symbol item = schema(*rest, rest_pointer, depth + 1);
    const Symbol sep_item = b_.group({{sep, item}});
    if (k > 0) {
      tail.push_back(b_.repeat(sep_item, lo, hi));
    } else if (lo > 0) {
      tail = {item, b_.repeat(sep_item, lo - 1, hi < 0 ? -1 : hi - 1)};
    } else {
      tail.push_back(b_.optional(b_.group({{item, b_.repeat(sep_item, 0, hi < 0 ? -1 : hi - 1)}})));
    }
  }
  Symbol list = b_.group({tail});
  const int64_t usable = max < 0 ? k : std::min(k, max);
  for (int64_t i = usable - 1; i >= 0; --i) {
    const Symbol item = schema(*prefix[i], pointer + prefix_key + std::to_string(i), depth + 1);
    Sequence take = i > 0 ? Sequence{sep, item, list} : Sequence{item, list};
    list = i < min ? b_.group({take}) : b_.group({Sequence{}, take});
  }
  return b_.group({{b_.byte('['), ws(), list, ws(), b_.byte(']')}});
}

}  // namespace deepinfer::grammar
