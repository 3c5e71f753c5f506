// Flattening a JSON Schema before it becomes grammar: allOf parts and $ref siblings merged into
// one schema (intersection of types, bounds, enums, properties, patternProperties,
// dependencies), and `not` rewritten into positive keywords where it has an exact equivalent.
#include <algorithm>

#include "grammar/json_schema_compiler.h"

namespace deepinfer::grammar {

namespace {

// The values of a const or enum (nullopt when there is neither).
std::optional<std::vector<Json>> values_of(const Json& s) {
  if (s.contains("const")) return std::vector<Json>{s["const"]};
  if (s.contains("enum") && s["enum"].is_array()) return std::vector<Json>(s["enum"].begin(), s["enum"].end());
  return std::nullopt;
}

// The values both a and b (each with a const or an enum) allow.
Json common_values(const Json& a, const Json& b) {
  const auto mine = values_of(a);
  const auto theirs = values_of(b);
  Json common = Json::array();
  for (const auto& v : *mine) {
    if (std::any_of(theirs->begin(), theirs->end(), [&](const Json& w) { return json_equal(v, w); })) {
      common.push_back(v);
    }
  }
  return common;
}

// Keeps only the types in allowed ("integer" stays when "number" does).
void restrict_types(Json& target, const std::set<std::string>& allowed) {
  const auto current = type_set(target);
  Json types = Json::array();
  for (const char* t : {"null", "boolean", "string", "number", "object", "array"}) {
    if (current.count(t) && allowed.count(t)) types.push_back(t);
  }
  if (current.count("integer") && allowed.count("integer") && !(current.count("number") && allowed.count("number"))) {
    types.push_back("integer");
  }
  if (types.empty()) {
    target["not"] = true;  // no type left: the schema accepts nothing
  } else {
    target["type"] = types;
  }
}

// A dependency as a schema (draft-04 lists of names are `required`).
Json dependency_schema(const Json& d) { return d.is_array() ? Json{{"required", d}} : d; }

}  // namespace

bool JsonSchemaCompiler::merge_into(Json& target, const Json& source, const std::string& pointer) {
  auto fail = [&](const std::string& what) {
    b_.fail("allOf at '#" + pointer + "': " + what);
    return false;
  };
  auto closed_against = [](const Json& closed, const Json& other) {
    // closed's additionalProperties must not reject a property other declares.
    if (!closed.contains("additionalProperties") || closed["additionalProperties"] == Json(true)) return true;
    if (!other.contains("properties") || closed.contains("patternProperties")) return true;
    for (const auto& [key, v] : other["properties"].items()) {
      if (!closed.contains("properties") || !closed["properties"].contains(key)) return false;
    }
    return true;
  };
  if (!closed_against(target, source) || !closed_against(source, target)) {
    return fail("additionalProperties of one part would reject properties of another");
  }
  for (const auto& [key, value] : source.items()) {
    if (is_annotation(key)) continue;
    if (!target.contains(key)) {
      if ((key == "enum" || key == "const") && (target.contains("enum") || target.contains("const"))) {
        const Json common = common_values(target, source);
        if (common.empty()) return fail("the parts' enum/const values have none in common");
        target.erase("const");
        target["enum"] = common;
      } else {
        target[key] = value;
      }
    } else if (key == "required" || key == kForbiddenKeys) {
      for (const auto& r : value) {
        if (std::find(target[key].begin(), target[key].end(), r) == target[key].end()) target[key].push_back(r);
      }
    } else if (key == "properties" || key == "patternProperties") {
      for (const auto& [name, sub] : value.items()) {
        if (!target[key].contains(name)) {
          target[key][name] = sub;
        } else if (!json_equal(target[key][name], sub)) {
          target[key][name] = Json{{"allOf", Json::array({target[key][name], sub})}};
        }
      }
    } else if (key == "dependencies" || key == "dependentRequired" || key == "dependentSchemas") {
      for (const auto& [name, sub] : value.items()) {
        Json& mine = target[key][name];
        if (mine.is_null()) {
          mine = sub;
        } else if (mine.is_array() && sub.is_array()) {
          for (const auto& r : sub) {
            if (std::find(mine.begin(), mine.end(), r) == mine.end()) mine.push_back(r);
          }
        } else {
          mine = Json{{"allOf", Json::array({dependency_schema(mine), dependency_schema(sub)})}};
        }
      }
    } else if (key == "type") {
      restrict_types(target, type_set(source));
      if (target.contains("not")) return fail("the parts allow no common type");
    } else if (key == "not") {
      target[key] = Json{{"anyOf", Json::array({target[key], value})}};
    } else if (key == "enum" || key == "const") {
      const Json common = common_values(target, source);
      if (common.empty()) return fail("the parts' enum/const values have none in common");
      target.erase("const");
      target["enum"] = common;
    } else if (key == "$ref" && value != target[key] && value.is_string()) {
      // Two references: both targets are merged, in order (properties keep the allOf order).
      const std::string mine = target[key].is_string() ? target[key].get<std::string>() : "";
      const Json* first = resolve(mine);
      const Json* second = resolve(value.get<std::string>());
      if (!first || !second || ++ref_merges_ > 1000) return fail("cannot combine two different '$ref'");
      auto merged = flatten(*first, mine.substr(1), 0);
      auto other = flatten(*second, value.get<std::string>().substr(1), 0);
      if (!merged || !other) return false;
      Json rest = target;
      rest.erase(key);
      if (!merge_into(*merged, rest, pointer) || !merge_into(*merged, *other, pointer)) return false;
      target = std::move(*merged);
    } else if (key == "minLength" || key == "minItems" || key == "minimum" || key == "minProperties") {
      if (value.is_number()) target[key] = std::max(target[key].get<double>(), value.get<double>());
    } else if (key == "maxLength" || key == "maxItems" || key == "maximum" || key == "maxProperties") {
      if (value.is_number()) target[key] = std::min(target[key].get<double>(), value.get<double>());
    } else if (!json_equal(target[key], value)) {
      return fail("cannot combine two different '" + key + "'");
    }
  }
  return true;
}

bool JsonSchemaCompiler::absorb_not(Json& target, const Json& negated, const std::string& pointer, int depth) {
  if (depth > b_.limits().max_nesting) {
    b_.fail("schema nested deeper than " + std::to_string(b_.limits().max_nesting) + " at '#" + pointer + "'");
    return false;
  }
  if (negated.is_boolean()) {
    if (negated.get<bool>()) target["not"] = true;
    return true;
  }
  std::set<std::string> keys;
  if (negated.is_object()) {
    for (const auto& [key, v] : negated.items()) {
      if (!is_annotation(key)) keys.insert(key);
    }
  }
  if (negated.is_object() && keys.empty()) {
    target["not"] = true;
    return true;
  }
  const Json* only = keys.size() == 1 ? &negated[*keys.begin()] : nullptr;
  if (only && keys.count("not")) {
    auto flat = flatten(*only, pointer + "/not", depth + 1);
    return flat && merge_into(target, *flat, pointer);
  }
  if (only && keys.count("anyOf") && only->is_array()) {
    for (size_t i = 0; i < only->size(); ++i) {
      if (!absorb_not(target, (*only)[i], pointer + "/anyOf/" + std::to_string(i), depth + 1)) return false;
    }
    return true;
  }
  if (only && keys.count("type")) {
    const auto removed = type_set(negated);
    if (removed.count("integer") && !removed.count("number") && type_set(target).count("number")) {
      unsupported("'not' of 'integer' where numbers are allowed", pointer);
      return b_.ok();
    }
    std::set<std::string> allowed;
    for (const char* t : {"null", "boolean", "string", "number", "integer", "object", "array"}) {
      if (!removed.count(t)) allowed.insert(t);
    }
    restrict_types(target, allowed);
    return true;
  }
  // `required` and `propertyNames` hold for every non-object, so their negation is an object.
  if (only && keys.count("required") && only->is_array() && only->size() == 1 && (*only)[0].is_string()) {
    restrict_types(target, {"object"});
    if (!target.contains(kForbiddenKeys)) target[kForbiddenKeys] = Json::array();
    target[kForbiddenKeys].push_back((*only)[0]);
    return true;
  }
  if (only && keys.count("propertyNames") && *only == Json(false)) {
    restrict_types(target, {"object"});
    target["minProperties"] = std::max(1.0, target.value("minProperties", Json(0)).get<double>());
    return true;
  }
  unsupported("keyword 'not'", pointer);
  return b_.ok();
}

std::optional<Json> JsonSchemaCompiler::flatten(const Json& s, const std::string& pointer, int depth) {
  if (depth > b_.limits().max_nesting) {
    b_.fail("schema nested deeper than " + std::to_string(b_.limits().max_nesting) + " at '#" + pointer + "'");
    return std::nullopt;
  }
  if (s.is_boolean()) return s == Json(true) ? Json::object() : Json{{"not", true}};
  Json out = s;
  out.erase("allOf");
  out.erase("not");
  bool has_siblings = false;
  for (const auto& [key, v] : out.items()) has_siblings |= key != "$ref" && !is_annotation(key);
  if (out.contains("$ref") && has_siblings && out["$ref"].is_string()) {
    const std::string target = out["$ref"].get<std::string>();
    const Json* node = resolve(target);
    if (!node) {
      unsupported("$ref '" + target + "' next to other keywords", pointer);
      return std::nullopt;
    }
    out.erase("$ref");
    auto flat = flatten(*node, target.substr(1), depth + 1);
    if (!flat || !check_keywords(*flat, target.substr(1)) || !merge_into(out, *flat, pointer)) return std::nullopt;
  }
  if (s.is_object() && s.contains("allOf") && s["allOf"].is_array()) {
    for (size_t i = 0; i < s["allOf"].size(); ++i) {
      const std::string sub_pointer = pointer + "/allOf/" + std::to_string(i);
      if (s["allOf"][i].is_object() && !check_keywords(s["allOf"][i], sub_pointer)) return std::nullopt;
      auto flat = flatten(s["allOf"][i], sub_pointer, depth + 1);
      if (!flat || !merge_into(out, *flat, sub_pointer)) return std::nullopt;
    }
    // A $ref that came in through allOf with siblings is resolved by one more pass.
    if (out.contains("$ref") || out.contains("allOf")) {
      bool ref_siblings = false;
      for (const auto& [key, v] : out.items()) ref_siblings |= key != "$ref" && !is_annotation(key);
      if (out.contains("allOf") || ref_siblings) {
        auto again = flatten(out, pointer, depth + 1);
        if (!again) return std::nullopt;
        out = std::move(*again);
      }
    }
  }
  if (s.is_object() && s.contains("not")) {
    if (!absorb_not(out, s["not"], pointer + "/not", depth + 1)) return std::nullopt;
    // What `not` added must not sit next to a bare $ref, which would ignore it.
    bool ref_siblings = false;
    for (const auto& [key, v] : out.items()) ref_siblings |= key != "$ref" && !is_annotation(key);
    if (out.contains("$ref") && ref_siblings) return flatten(out, pointer, depth + 1);
  }
  return out;
}

}  // namespace deepinfer::grammar
