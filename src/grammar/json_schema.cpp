// The JSON Schema front end: keyword policy, $ref (local, recursive), enum/const (values
// checked by the validator), anyOf / provably disjoint oneOf. Merging and `not`:
// json_schema_merge.cpp; objects and arrays: json_objects.cpp; leaves:
// json_values.cpp, json_numbers.cpp.
#include <algorithm>
#include <set>

#include "core/json_nesting.h"
#include "grammar/automaton.h"
#include "grammar/json_schema_compiler.h"

namespace deepinfer::grammar {

namespace {

const std::set<std::string> kAnnotations = {
    "title", "description", "default", "examples", "example", "deprecated", "readOnly", "writeOnly", "$comment",
    "$schema", "$id", "id", "$defs", "definitions", "contentMediaType", "contentEncoding", "markdownDescription",
    "$vocabulary", "discriminator", "xml", "externalDocs", "nullable_description"};
// Validation keywords with a meaning this front end does not enforce: an error, or a warning
// when lenient. Unknown keywords are annotations (JSON Schema ignores them).
// (not, patternProperties, min/maxProperties, dependencies and multipleOf are enforced in the
// forms json_schema_merge.cpp, json_objects.cpp and json_values.cpp accept, an error otherwise;
// on enum/const values every keyword the validator knows is.)
const std::set<std::string> kUnsupported = {
    "if", "then", "else", "uniqueItems", "contains", "minContains", "maxContains", "propertyNames",
    "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef", "$anchor",
    "$dynamicAnchor", "$recursiveAnchor", "contentSchema"};

}  // namespace

bool is_annotation(const std::string& key) { return kAnnotations.count(key) || key.rfind("x-", 0) == 0; }

std::set<std::string> type_set(const Json& s) {
  std::set<std::string> out;
  if (!s.contains("type")) return {"null", "boolean", "string", "number", "integer", "object", "array"};
  const Json& t = s["type"];
  if (t.is_string()) out.insert(t.get<std::string>());
  if (t.is_array()) {
    for (const auto& e : t) {
      if (e.is_string()) out.insert(e.get<std::string>());
    }
  }
  if (out.count("number")) out.insert("integer");
  return out;
}

namespace {

std::string type_of_value(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_string()) return "string";
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  if (v.is_number()) return "number";
  return v.is_object() ? "object" : "array";
}

// The values a branch can take when it is a const or enum, else nullopt.
std::optional<std::vector<Json>> finite_values(const Json& s) {
  if (s.contains("const")) return std::vector<Json>{s["const"]};
  if (s.contains("enum") && s["enum"].is_array()) return std::vector<Json>(s["enum"].begin(), s["enum"].end());
  return std::nullopt;
}

bool share_a_value(const std::vector<Json>& a, const std::vector<Json>& b) {
  for (const auto& x : a) {
    for (const auto& y : b) {
      if (json_equal(x, y)) return true;
    }
  }
  return false;
}

bool requires_key(const Json& s, const std::string& key) {
  return s.contains("required") && s["required"].is_array() &&
         std::find(s["required"].begin(), s["required"].end(), Json(key)) != s["required"].end();
}

// Whether s rejects every object that has key (explicitly closed, key not declared).
bool rejects_key(const Json& s, const std::string& key) {
  if (!s.contains("additionalProperties") || s["additionalProperties"] != Json(false)) return false;
  if (s.contains("patternProperties")) return false;
  return !(s.contains("properties") && s["properties"].is_object() && s["properties"].contains(key));
}

}  // namespace

void JsonSchemaCompiler::unsupported(const std::string& what, const std::string& pointer) {
  const std::string message = what + " at '" + (pointer.empty() ? "#" : "#" + pointer) + "'";
  if (options_.lenient) {
    if (warnings_) warnings_->push_back("ignored " + message);
    return;
  }
  b_.fail("unsupported " + message + " (set lenient to ignore it)");
}

namespace {

// Forms of unsupported keywords that constrain nothing: uniqueItems false or on arrays of at
// most one item, `if` without then/else, then/else without `if`.
bool no_op(const Json& s, const std::string& key, const Json& value) {
  if (key == "uniqueItems") {
    return value == Json(false) || (s.contains("maxItems") && s["maxItems"].is_number() && s["maxItems"].get<double>() <= 1);
  }
  if (key == "if") return !s.contains("then") && !s.contains("else");
  return (key == "then" || key == "else") && !s.contains("if");
}

}  // namespace

bool JsonSchemaCompiler::check_keywords(const Json& s, const std::string& pointer) {
  for (const auto& [key, value] : s.items()) {
    if (kUnsupported.count(key) && !no_op(s, key, value)) {
      unsupported("keyword '" + key + "'", pointer + "/" + escape_pointer(key));
    }
  }
  return b_.ok();
}

const Json* JsonSchemaCompiler::resolve(const std::string& target) { return resolve_pointer(*root_, target); }

Symbol JsonSchemaCompiler::ref(const std::string& target, const std::string& pointer, int depth) {
  if (auto found = ref_rules_.find(target); found != ref_rules_.end()) return found->second;
  const Json* node = resolve(target);
  if (!node) {
    if (target.empty() || target[0] != '#') {
      unsupported("external $ref '" + target + "'", pointer + "/$ref");
      return any_value();
    }
    b_.fail("$ref '" + target + "' at '#" + pointer + "' points at nothing");
    return b_.empty();
  }
  const int32_t rule = b_.declare_rule("ref_" + std::to_string(ref_rules_.size()));
  ref_rules_.emplace(target, rule);
  const Symbol body = schema(*node, target.substr(1), depth + 1);
  b_.set_alternatives(rule, {Sequence{body}});
  return rule;
}

// The values a branch can take when it is a const or enum, or a union of such branches.
std::optional<std::vector<Json>> JsonSchemaCompiler::branch_values(const Json& s, int depth) {
  if (!s.is_object() || depth > b_.limits().max_nesting) return std::nullopt;
  if (auto values = finite_values(s)) return values;
  if (s.contains("$ref") && s["$ref"].is_string()) {
    const Json* node = resolve(s["$ref"].get<std::string>());
    return node ? branch_values(*node, depth + 1) : std::nullopt;
  }
  for (const char* keyword : {"anyOf", "oneOf"}) {
    if (!s.contains(keyword) || !s[keyword].is_array()) continue;
    std::vector<Json> out;
    for (const auto& branch : s[keyword]) {
      auto values = branch_values(branch, depth + 1);
      if (!values) return std::nullopt;
      out.insert(out.end(), values->begin(), values->end());
    }
    return out;
  }
  return std::nullopt;
}

// Types a branch can take, sharpened by const/enum and by the branches of anyOf/oneOf.
std::set<std::string> JsonSchemaCompiler::branch_types(const Json& s, int depth) {
  if (auto values = branch_values(s, depth)) {
    std::set<std::string> out;
    for (const auto& v : *values) {
      out.insert(type_of_value(v));
      if (type_of_value(v) == "integer") out.insert("number");
    }
    return out;
  }
  auto out = type_set(s);
  if (depth > b_.limits().max_nesting || !s.is_object()) return out;
  if (s.contains("$ref") && s["$ref"].is_string()) {
    if (const Json* node = resolve(s["$ref"].get<std::string>())) return branch_types(*node, depth + 1);
  }
  for (const char* keyword : {"anyOf", "oneOf"}) {
    if (!s.contains(keyword) || !s[keyword].is_array()) continue;
    std::set<std::string> branches;
    for (const auto& branch : s[keyword]) {
      const auto types = branch_types(branch, depth + 1);
      branches.insert(types.begin(), types.end());
    }
    std::set<std::string> both;
    for (const auto& t : out) {
      if (branches.count(t)) both.insert(t);
    }
    out = both;
  }
  return out;
}

bool JsonSchemaCompiler::disjoint(const Json& a, const Json& b, int depth) {
  const auto ta = branch_types(a, depth), tb = branch_types(b, depth);
  std::set<std::string> shared_types;
  for (const auto& t : ta) {
    if (tb.count(t)) shared_types.insert(t);
  }
  if (shared_types.empty()) return true;
  const auto va = branch_values(a, depth), vb = branch_values(b, depth);
  if (va && vb) return !share_a_value(*va, *vb);
  // A finite branch against any other: none of its values may satisfy the other.
  const std::pair<const std::optional<std::vector<Json>>*, const Json*> finite_sides[] = {{&va, &b}, {&vb, &a}};
  for (const auto& [values, other] : finite_sides) {
    if (!*values) continue;
    bool none = true;
    for (const auto& v : **values) none &= validator_->validate(*other, v, "") == SchemaValidator::Verdict::kInvalid;
    if (none) return true;
  }
  if (shared_types == std::set<std::string>{"string"}) return disjoint_patterns(a, b);
  if (shared_types != std::set<std::string>{"object"}) return false;
  // Objects: one requires a key the other rejects, or both require a key with different consts.
  const std::pair<const Json*, const Json*> orders[] = {{&a, &b}, {&b, &a}};
  for (const auto& [px, py] : orders) {
    const Json& x = *px;
    const Json& y = *py;
    if (!x.contains("required") || !x["required"].is_array()) continue;
    for (const auto& key : x["required"]) {
      if (key.is_string() && rejects_key(y, key.get<std::string>())) return true;
    }
  }
  if (a.contains("properties") && b.contains("properties") && a["properties"].is_object() && b["properties"].is_object()) {
    for (const auto& [key, pa] : a["properties"].items()) {
      if (!b["properties"].contains(key) || !requires_key(a, key) || !requires_key(b, key)) continue;
      const auto fa = branch_values(pa, depth), fb = branch_values(b["properties"][key], depth);
      if (fa && fb && !share_a_value(*fa, *fb)) return true;
    }
  }
  return false;
}

namespace {

// Whether a and b are objects that are both closed (additionalProperties false) and declare
// no property name in common, so that {} is the only object both can accept.
bool only_empty_in_common(const Json& a, const Json& b) {
  for (const Json* s : {&a, &b}) {
    if (!s->contains("additionalProperties") || (*s)["additionalProperties"] != Json(false)) return false;
    if (s->contains("patternProperties")) return false;
  }
  if (!a.contains("properties") || !b.contains("properties")) return true;
  for (const auto& [key, v] : a["properties"].items()) {
    if (b["properties"].contains(key)) return false;
  }
  return true;
}

}  // namespace

// Strings whose patterns cannot begin alike: the first bytes each pattern's grammar allows
// after the opening quote are disjoint, and at most one of them matches the empty string.
bool JsonSchemaCompiler::disjoint_patterns(const Json& a, const Json& b) {
  std::vector<std::pair<ByteSet, bool>> starts;
  for (const Json* s : {&a, &b}) {
    if (!s->contains("pattern") || !(*s)["pattern"].is_string() || s->contains("format") || s->contains("$ref")) {
      return false;
    }
    GrammarBuilder builder(b_.limits());
    auto body = build_regex(builder, (*s)["pattern"].get<std::string>(), true);
    if (!body.ok()) return false;
    const int32_t root = builder.define_rule("root", {Sequence{*body}});
    auto grammar = builder.finish(root);
    if (!grammar.ok()) return false;
    Automaton automaton(*grammar, 1000, 1000);
    starts.emplace_back(automaton.next_bytes(automaton.initial()), automaton.can_end(automaton.initial()));
  }
  for (int i = 0; i < 4; ++i) {
    if (starts[0].first.bits[i] & starts[1].first.bits[i]) return false;
  }
  return !(starts[0].second && starts[1].second);
}

std::optional<std::vector<Json>> JsonSchemaCompiler::finite_values_of(const Json& s, int depth) {
  if (!s.is_object() || depth > 50) return std::nullopt;
  if (auto values = finite_values(s)) return values;
  if (s.contains("allOf") && s["allOf"].is_array()) {
    for (const auto& part : s["allOf"]) {
      if (auto values = finite_values_of(part, depth + 1)) return values;
    }
  }
  if (s.contains("$ref") && s["$ref"].is_string()) {
    if (const Json* node = resolve(s["$ref"].get<std::string>())) return finite_values_of(*node, depth + 1);
  }
  return std::nullopt;
}

Symbol JsonSchemaCompiler::finite(const Json& s, const std::vector<Json>& values, const std::string& pointer) {
  // The values listed by s's own const (or else enum) are members by construction: checking them
  // against that list again would cost |values|^2 (a 100k-entry enum: minutes).
  Json rest = s;
  if (rest.contains("const")) {
    rest.erase("const");
  } else if (rest.contains("enum")) {
    rest.erase("enum");
  }
  std::vector<std::string> literals;
  for (const auto& v : values) {
    const auto verdict = validator_->validate(rest, v, pointer);
    if (verdict == SchemaValidator::Verdict::kUnknown) {
      unsupported(validator_->unknown() + " (checking the enum/const values)", pointer);
      if (!b_.ok()) return 0;
    }
    if (verdict != SchemaValidator::Verdict::kInvalid) {
      literals.push_back(v.dump(-1, ' ', false, Json::error_handler_t::replace));
    }
  }
  if (literals.empty()) {
    b_.fail("'enum'/'const' at '#" + pointer + "' leaves no value that satisfies the schema");
    return 0;
  }
  return b_.one_of_literals(std::move(literals));
}

Symbol JsonSchemaCompiler::schema(const Json& s, const std::string& pointer, int depth) {
  if (!b_.ok()) return 0;
  if (depth > b_.limits().max_nesting) {
    b_.fail("schema nested deeper than " + std::to_string(b_.limits().max_nesting) + " at '#" + pointer + "'");
    return 0;
  }
  if (s.is_boolean()) {
    if (s.get<bool>()) return any_value();
    b_.fail("schema 'false' at '#" + pointer + "' accepts nothing");
    return 0;
  }
  if (!s.is_object()) {
    b_.fail("schema at '#" + pointer + "' must be an object or a boolean");
    return 0;
  }
  // A finite value set (enum/const here or in an allOf / $ref part) is exact whatever else the
  // schema says: each value is checked against all of it.
  if (auto values = finite_values_of(s, 0)) {
    if (s.contains("enum") && !s["enum"].is_array()) {
      b_.fail("'enum' at '#" + pointer + "' must be an array");
      return 0;
    }
    return finite(s, *values, pointer);
  }
  if (!check_keywords(s, pointer)) return 0;
  const auto flat = flatten(s, pointer, depth);
  if (!flat) return 0;
  const Json& f = *flat;
  if (f.contains("not")) {
    b_.fail("schema at '#" + pointer + "' accepts nothing (its 'not', 'type' or allOf parts leave no value)");
    return 0;
  }
  if (f.contains("$ref")) {
    if (!f["$ref"].is_string()) {
      b_.fail("'$ref' at '#" + pointer + "' must be a string");
      return 0;
    }
    return ref(f["$ref"].get<std::string>(), pointer, depth);
  }
  if (f.contains("anyOf") && f.contains("oneOf")) {
    unsupported("'anyOf' together with 'oneOf'", pointer);
    if (!b_.ok()) return 0;
  }
  if (f.contains("anyOf")) return alternatives(f, "anyOf", pointer, depth);
  if (f.contains("oneOf")) return alternatives(f, "oneOf", pointer, depth);
  bool typed = f.contains("type");
  static const char* kTypeKeywords[] = {"properties", "required", "additionalProperties", "items", "prefixItems",
                                        "additionalItems", "minItems", "maxItems", "minLength", "maxLength",
                                        "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
                                        "exclusiveMaximum", "patternProperties", "minProperties",
                                        "maxProperties", "dependencies", "dependentRequired",
                                        "dependentSchemas", "multipleOf", kForbiddenKeys};
  bool constrained = false;
  for (const char* k : kTypeKeywords) constrained |= f.contains(k);
  if (!typed && !constrained) return any_value();
  auto types = type_set(f);
  if (types.count("number")) types.erase("integer");
  std::vector<Sequence> alts;
  for (const char* t : {"null", "boolean", "integer", "number", "string", "array", "object"}) {
    if (types.count(t)) alts.push_back({schema_of_type(f, t, pointer, depth)});
  }
  if (alts.empty()) {
    b_.fail("'type' at '#" + pointer + "' names no known type");
    return 0;
  }
  return b_.group(std::move(alts));
}

Symbol JsonSchemaCompiler::schema_of_type(const Json& s, const std::string& type, const std::string& pointer,
                                          int depth) {
  if (type == "null") return b_.literal("null");
  if (type == "boolean") return b_.group({{b_.literal("true")}, {b_.literal("false")}});
  if (type == "string") return string(s, pointer);
  if (type == "integer") return integer(s, pointer);
  if (type == "number") return number(s, pointer);
  if (type == "array") return array(s, pointer, depth);
  return object(s, pointer, depth);
}

Symbol JsonSchemaCompiler::alternatives(const Json& s, const std::string& keyword, const std::string& pointer,
                                        int depth) {
  const Json& branches = s[keyword];
  if (!branches.is_array() || branches.empty()) {
    b_.fail("'" + keyword + "' at '#" + pointer + "' must be a non-empty array");
    return 0;
  }
  Json siblings = s;
  siblings.erase(keyword);
  bool has_siblings = false;
  for (const auto& [key, v] : siblings.items()) has_siblings |= !is_annotation(key);
  std::vector<Json> flat;
  for (size_t i = 0; i < branches.size(); ++i) {
    const std::string sub = pointer + "/" + keyword + "/" + std::to_string(i);
    if (branches[i].is_object() && !check_keywords(branches[i], sub)) return 0;
    auto branch = flatten(branches[i], sub, depth + 1);
    if (!branch) return 0;
    // A bare $ref branch is resolved so siblings merge into it and oneOf can compare it.
    if (branch->contains("$ref") && (*branch)["$ref"].is_string() && (has_siblings || keyword == "oneOf")) {
      const std::string target = (*branch)["$ref"].get<std::string>();
      if (const Json* node = resolve(target); node && target.size() > 1) {
        auto resolved = flatten(*node, target.substr(1), depth + 1);
        if (!resolved) return 0;
        if (!resolved->contains("$ref")) branch = resolved;
      }
    }
    if (has_siblings) {
      Json merged = siblings;
      if (!merge_into(merged, *branch, sub)) return 0;
      branch = merged;
    }
    flat.push_back(*branch);
  }
  if (keyword == "oneOf") {
    bool empty_object_overlap = false;
    for (size_t i = 0; i < flat.size(); ++i) {
      for (size_t j = i + 1; j < flat.size(); ++j) {
        if (disjoint(flat[i], flat[j], depth)) continue;
        const std::set<std::string> objects = {"object"};
        if (branch_types(flat[i], depth) == objects && branch_types(flat[j], depth) == objects &&
            only_empty_in_common(flat[i], flat[j])) {
          empty_object_overlap = true;
          continue;
        }
        {
          unsupported("'oneOf' whose branches " + std::to_string(i) + " and " + std::to_string(j) +
                          " may overlap (treated as anyOf)",
                      pointer + "/oneOf");
          if (!b_.ok()) return 0;
        }
      }
    }
    // Closed objects with no property name in common share only {}: it is valid when exactly
    // one branch accepts it.
    std::vector<size_t> accept_empty;
    for (size_t i = 0; empty_object_overlap && i < flat.size(); ++i) {
      if (validator_->validate(flat[i], Json::object(), pointer) != SchemaValidator::Verdict::kInvalid) {
        accept_empty.push_back(i);
      }
    }
    for (size_t i : accept_empty.size() > 1 ? accept_empty : std::vector<size_t>{}) {
      flat[i]["minProperties"] = std::max(1.0, flat[i].value("minProperties", Json(0)).get<double>());
    }
  }
  std::vector<Sequence> alts;
  for (size_t i = 0; i < flat.size(); ++i) {
    if (flat[i].contains("not")) continue;  // a 'false' branch adds nothing
    alts.push_back({schema(flat[i], pointer + "/" + keyword + "/" + std::to_string(i), depth + 1)});
  }
  if (alts.empty()) {
    b_.fail("'" + keyword + "' at '#" + pointer + "' has no satisfiable branch");
    return 0;
  }
  return b_.group(std::move(alts));
}

Result<Grammar> JsonSchemaCompiler::compile_document(const Json& root) {
  root_ = &root;
  validator_ = std::make_unique<SchemaValidator>(root, b_.limits());
  return b_.finish_root(schema(root, "", 0), "JSON Schema");
}

Result<Grammar> compile_json_schema(std::string_view schema_json, const JsonSchemaOptions& options,
                                    std::vector<std::string>* warnings, GrammarLimits limits) {
  if (const int64_t depth = json_nesting_depth(schema_json); depth > kMaxJsonNesting) {
    return Error{"JSON Schema: nested deeper than " + std::to_string(kMaxJsonNesting) + " levels of arrays and objects (" +
                 std::to_string(depth) + ")"};
  }
  Json root;
  try {
    root = Json::parse(schema_json.begin(), schema_json.end(), nullptr, true, false);
  } catch (const std::exception& e) {
    return Error{std::string("JSON Schema: not valid JSON: ") + e.what()};
  }
  return JsonSchemaCompiler(options, limits, warnings).compile_document(root);
}

Result<Grammar> compile_json_object(const JsonSchemaOptions& options, GrammarLimits limits) {
  return JsonSchemaCompiler(options, limits, nullptr).compile_object_mode();
}

}  // namespace deepinfer::grammar
