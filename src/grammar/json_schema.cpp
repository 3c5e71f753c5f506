// The JSON Schema front end: keyword policy, $ref (local, recursive), allOf merging,
// anyOf / provably disjoint oneOf (objects and arrays: json_containers.cpp).
#include <algorithm>
#include <set>

#include "grammar/json_schema_compiler.h"

namespace deepinfer::grammar {

namespace {

const std::set<std::string> kAnnotations = {
    "title", "description", "default", "examples", "example", "deprecated", "readOnly", "writeOnly", "$comment",
    "$schema", "$id", "id", "$defs", "definitions", "contentMediaType", "contentEncoding", "markdownDescription",
    "$vocabulary", "discriminator", "xml", "externalDocs", "nullable_description"};
// Validation keywords with a meaning this front end does not enforce: an error, or a warning
// when lenient. Unknown keywords are annotations (JSON Schema ignores them).
const std::set<std::string> kUnsupported = {
    "not", "if", "then", "else", "uniqueItems", "contains", "minContains", "maxContains", "patternProperties",
    "propertyNames", "minProperties", "maxProperties", "multipleOf", "dependencies", "dependentRequired",
    "dependentSchemas", "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef", "$anchor",
    "$dynamicAnchor", "$recursiveAnchor", "contentSchema"};

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

// Types a branch can take, sharpened by const/enum.
std::set<std::string> branch_types(const Json& s) {
  if (auto values = finite_values(s)) {
    std::set<std::string> out;
    for (const auto& v : *values) {
      out.insert(type_of_value(v));
      if (type_of_value(v) == "integer") out.insert("number");
    }
    return out;
  }
  return type_set(s);
}

bool disjoint(const Json& a, const Json& b) {
  const auto ta = branch_types(a), tb = branch_types(b);
  bool overlap = false;
  for (const auto& t : ta) overlap |= tb.count(t) > 0;
  if (!overlap) return true;
  const auto va = finite_values(a), vb = finite_values(b);
  if (va && vb) {
    for (const auto& x : *va)
      for (const auto& y : *vb)
        if (x == y) return false;
    return true;
  }
  // Objects told apart by a required property with different consts.
  if (a.contains("properties") && b.contains("properties") && a["properties"].is_object() && b["properties"].is_object()) {
    for (const auto& property : a["properties"].items()) {
      const std::string key = property.key();  // a named copy: lambdas cannot capture bindings
      const Json& pa = property.value();
      if (!b["properties"].contains(key)) continue;
      const Json& pb = b["properties"][key];
      auto required = [&](const Json& s) {
        return s.contains("required") && s["required"].is_array() &&
               std::find(s["required"].begin(), s["required"].end(), Json(key)) != s["required"].end();
      };
      const auto fa = pa.is_object() ? finite_values(pa) : std::nullopt;
      const auto fb = pb.is_object() ? finite_values(pb) : std::nullopt;
      if (!fa || !fb || !required(a) || !required(b)) continue;
      bool shared = false;
      for (const auto& x : *fa)
        for (const auto& y : *fb) shared |= x == y;
      if (!shared && (ta == std::set<std::string>{"object"} || tb == std::set<std::string>{"object"})) return true;
    }
  }
  return false;
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

bool JsonSchemaCompiler::check_keywords(const Json& s, const std::string& pointer) {
  for (const auto& [key, value] : s.items()) {
    if (kUnsupported.count(key)) unsupported("keyword '" + key + "'", pointer + "/" + escape_pointer(key));
  }
  return b_.ok();
}

const Json* JsonSchemaCompiler::resolve(const std::string& target) {
  if (target.empty() || target[0] != '#') return nullptr;
  const Json* node = root_;
  size_t pos = 1;
  while (pos < target.size()) {
    if (target[pos] != '/') return nullptr;
    const size_t next = std::min(target.find('/', pos + 1), target.size());
    std::string token = target.substr(pos + 1, next - pos - 1);
    std::string decoded;
    for (size_t i = 0; i < token.size(); ++i) {
      if (token[i] == '~' && i + 1 < token.size()) {
        decoded += token[i + 1] == '1' ? '/' : '~';
        ++i;
      } else if (token[i] == '%' && i + 2 < token.size()) {
        decoded += static_cast<char>(std::stoi(token.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        decoded += token[i];
      }
    }
    if (node->is_object() && node->contains(decoded)) {
      node = &(*node)[decoded];
    } else if (node->is_array() && !decoded.empty() && decoded.find_first_not_of("0123456789") == std::string::npos &&
               std::stoul(decoded) < node->size()) {
      node = &(*node)[std::stoul(decoded)];
    } else {
      return nullptr;
    }
    pos = next;
  }
  return node;
}

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

bool JsonSchemaCompiler::merge_into(Json& target, const Json& source, const std::string& pointer) {
  auto fail = [&](const std::string& what) {
    b_.fail("allOf at '#" + pointer + "': " + what);
    return false;
  };
  auto closed_against = [](const Json& closed, const Json& other) {
    // closed's additionalProperties must not reject a property other declares.
    if (!closed.contains("additionalProperties") || closed["additionalProperties"] == Json(true)) return true;
    if (!other.contains("properties")) return true;
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
      target[key] = value;
    } else if (key == "required") {
      for (const auto& r : value) {
        if (std::find(target[key].begin(), target[key].end(), r) == target[key].end()) target[key].push_back(r);
      }
    } else if (key == "properties") {
      for (const auto& [name, sub] : value.items()) {
        if (!target[key].contains(name)) {
          target[key][name] = sub;
        } else if (target[key][name] != sub) {
          target[key][name] = Json{{"allOf", Json::array({target[key][name], sub})}};
        }
      }
    } else if (key == "type") {
      const auto a = type_set(target), b = type_set(source);
      Json types = Json::array();
      for (const char* t : {"null", "boolean", "string", "number", "object", "array"}) {
        if (a.count(t) && b.count(t)) types.push_back(t);
      }
      if (!a.count("number") || !b.count("number")) {
        if (a.count("integer") && b.count("integer")) types.push_back("integer");
      }
      if (types.empty()) return fail("the parts allow no common type");
      target[key] = types;
    } else if (key == "minLength" || key == "minItems" || key == "minimum") {
      if (value.is_number()) target[key] = std::max(target[key].get<double>(), value.get<double>());
    } else if (key == "maxLength" || key == "maxItems" || key == "maximum") {
      if (value.is_number()) target[key] = std::min(target[key].get<double>(), value.get<double>());
    } else if (target[key] != value) {
      return fail("cannot combine two different '" + key + "'");
    }
  }
  return true;
}

std::optional<Json> JsonSchemaCompiler::flatten(const Json& s, const std::string& pointer, int depth) {
  if (depth > b_.limits().max_nesting) {
    b_.fail("schema nested deeper than " + std::to_string(b_.limits().max_nesting) + " at '#" + pointer + "'");
    return std::nullopt;
  }
  if (s.is_boolean()) return s == Json(true) ? Json::object() : Json{{"not", true}};
  Json out = s;
  out.erase("allOf");
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
    if (out.contains("$ref") || out.contains("allOf")) return flatten(out, pointer, depth + 1);
  }
  return out;
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
  if (!check_keywords(s, pointer)) return 0;
  const auto flat = flatten(s, pointer, depth);
  if (!flat) return 0;
  const Json& f = *flat;
  if (f.contains("not")) {
    b_.fail("schema 'false' at '#" + pointer + "' accepts nothing");
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
  if (auto values = finite_values(f)) {
    if (f.contains("enum") && !f["enum"].is_array()) {
      b_.fail("'enum' at '#" + pointer + "' must be an array");
      return 0;
    }
    const auto types = type_set(f);
    std::vector<std::string> literals;
    for (const auto& v : *values) {
      const std::string t = type_of_value(v);
      if (types.count(t) || (t == "integer" && types.count("number"))) {
        literals.push_back(v.dump(-1, ' ', false, Json::error_handler_t::replace));
      }
    }
    if (literals.empty()) {
      b_.fail("'enum'/'const' at '#" + pointer + "' leaves no value of the allowed types");
      return 0;
    }
    return b_.one_of_literals(std::move(literals));
  }
  bool typed = f.contains("type");
  static const char* kTypeKeywords[] = {"properties", "required", "additionalProperties", "items", "prefixItems",
                                        "additionalItems", "minItems", "maxItems", "minLength", "maxLength",
                                        "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
                                        "exclusiveMaximum"};
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
    for (size_t i = 0; i < flat.size(); ++i) {
      for (size_t j = i + 1; j < flat.size(); ++j) {
        if (!disjoint(flat[i], flat[j])) {
          unsupported("'oneOf' whose branches " + std::to_string(i) + " and " + std::to_string(j) +
                          " may overlap (treated as anyOf)",
                      pointer + "/oneOf");
          if (!b_.ok()) return 0;
        }
      }
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
  const Symbol top = schema(root, "", 0);
  if (!b_.ok()) return Error{"JSON Schema: " + b_.error()};
  Sequence body;
  b_.append_literal(body, options_.prefix);
  body.push_back(top);
  b_.append_literal(body, options_.suffix);
  const int32_t rule = b_.define_rule("root", {std::move(body)});
  auto grammar = b_.finish(rule);
  if (!grammar.ok()) return Error{"JSON Schema: " + grammar.error().message};
  return grammar;
}

Result<Grammar> compile_json_schema(std::string_view schema_json, const JsonSchemaOptions& options,
                                    std::vector<std::string>* warnings, GrammarLimits limits) {
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
