// JSON Schema objects (properties in order, required, additionalProperties with declared keys
// excluded) and arrays (prefixItems / items, minItems / maxItems).
#include <algorithm>
#include <set>

#include "grammar/json_schema_compiler.h"

namespace deepinfer::grammar {

Symbol JsonSchemaCompiler::object(const Json& s, const std::string& pointer, int depth) {
  struct Property {
    std::string name;
    const Json* schema;
    bool required;
  };
  static const Json kTrue = true;
  std::vector<Property> props;
  std::set<std::string> required;
  if (s.contains("required") && s["required"].is_array()) {
    for (const auto& r : s["required"]) {
      if (r.is_string()) required.insert(r.get<std::string>());
    }
  }
  // Strict mode closes objects that declare properties; a bare {"type": "object"} stays open.
  const bool declares = s.contains("properties") || s.contains("required");
  const Json additional = s.contains("additionalProperties") ? s["additionalProperties"]
                                                              : Json(!(options_.strict_properties && declares));
  if (s.contains("properties") && s["properties"].is_object()) {
    for (const auto& [name, sub] : s["properties"].items()) {
      props.push_back({name, &sub, required.count(name) > 0});
    }
  }
  for (const auto& name : required) {
    if (std::any_of(props.begin(), props.end(), [&](const Property& p) { return p.name == name; })) continue;
    if (additional == Json(false)) {
      b_.fail("required property '" + name + "' at '#" + pointer + "' is not allowed by additionalProperties");
      return 0;
    }
    props.push_back({name, additional.is_object() ? &s["additionalProperties"] : &kTrue, true});
  }
  const Symbol sep = b_.group({{ws(), b_.byte(','), ws()}});
  const Symbol colon = b_.group({{ws(), b_.byte(':'), ws()}});
  std::vector<Symbol> kv;
  std::vector<std::string> names;
  for (const auto& p : props) {
    const Symbol value = schema(*p.schema, pointer + "/properties/" + escape_pointer(p.name), depth + 1);
    kv.push_back(b_.group({{literal_value(Json(p.name)), colon, value}}));
    names.push_back(p.name);
  }
  std::optional<Symbol> extra;
  if (additional != Json(false)) {
    const Symbol value = schema(additional, pointer + "/additionalProperties", depth + 1);
    extra = b_.group({{string_excluding(names), colon, value}});
  }
  if (!b_.ok()) return 0;
  // rest[c][i]: properties i.. where c says whether one was already written (needs a comma).
  const size_t n = props.size();
  std::vector<int32_t> rest[2];
  for (int c = 0; c < 2; ++c) {
    rest[c].resize(n + 1);
    for (size_t i = 0; i <= n; ++i) rest[c][i] = b_.declare_rule("obj_" + std::to_string(b_.num_rules()));
  }
  for (int c = 0; c < 2; ++c) {
    if (extra) {
      const Symbol more = b_.repeat(b_.group({{sep, *extra}}), 0, -1);
      Sequence one = c ? Sequence{sep, *extra, more} : Sequence{*extra, more};
      b_.set_alternatives(rest[c][n], {Sequence{}, one});
    } else {
      b_.set_alternatives(rest[c][n], {Sequence{}});
    }
    for (size_t i = 0; i < n; ++i) {
      Sequence take = c ? Sequence{sep, kv[i], rest[1][i + 1]} : Sequence{kv[i], rest[1][i + 1]};
      if (props[i].required) {
        b_.set_alternatives(rest[c][i], {take});
      } else {
        b_.set_alternatives(rest[c][i], {take, Sequence{rest[c][i + 1]}});
      }
    }
  }
  return b_.group({{b_.byte('{'), ws(), rest[0][0], ws(), b_.byte('}')}});
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
