// The structural front end: markup, marker-free text and JSON Schema values in one grammar.
#include "grammar/structural.h"

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/json_nesting.h"
#include "grammar/token_vocab.h"

namespace deepinfer::grammar {
namespace {

using Json = nlohmann::ordered_json;

// The code points of UTF-8 text; false when it is not valid UTF-8.
bool decode_utf8(std::string_view text, std::vector<uint32_t>& out) {
  out.clear();
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<uint8_t>(text[i]);
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > text.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0xFF >> (n + 1));
    for (int k = 1; k < n; ++k) {
      const auto next = static_cast<uint8_t>(text[i + k]);
      if ((next & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (next & 0x3F);
    }
    out.push_back(cp);
    i += n;
  }
  return true;
}

// Aho-Corasick over code points: node 0 is the root; out marks nodes where a marker has just
// been completed (directly or through a failure link).
struct MarkerAutomaton {
  std::vector<std::map<uint32_t, int>> next = {{}};
  std::vector<int> fail = {0};
  std::vector<bool> out = {false};

  void add(const std::vector<uint32_t>& marker) {
    int node = 0;
    for (uint32_t c : marker) {
      auto it = next[node].find(c);
      if (it == next[node].end()) {
        it = next[node].emplace(c, static_cast<int>(next.size())).first;
        next.emplace_back();
        fail.push_back(0);
        out.push_back(false);
      }
      node = it->second;
    }
    out[node] = true;
  }

  void link() {
    std::vector<int> queue;
    for (const auto& [c, child] : next[0]) queue.push_back(child);
    for (size_t i = 0; i < queue.size(); ++i) {
      const int node = queue[i];
      out[node] = out[node] || out[fail[node]];
      for (const auto& [c, child] : next[node]) {
        fail[child] = step(fail[node], c);
        queue.push_back(child);
      }
    }
  }

  int step(int node, uint32_t c) const {
    while (true) {
      if (auto it = next[node].find(c); it != next[node].end()) return it->second;
      if (node == 0) return 0;
      node = fail[node];
    }
  }
};

std::vector<CodepointRange> as_ranges(const std::set<uint32_t>& cps) {
  std::vector<CodepointRange> ranges;
  for (uint32_t c : cps) ranges.push_back({c, c});
  return ranges;
}

class StructuralCompiler {
 public:
  StructuralCompiler(const JsonSchemaOptions& json, std::vector<std::string>* warnings, GrammarLimits limits)
      : b_(limits), json_(json), warnings_(warnings), limits_(limits) {}

  Result<Grammar> compile(const Json& spec) {
    return b_.finish_root(node(spec, "", 0), "structural grammar");
  }

 private:
  Symbol fail(const std::string& pointer, const std::string& message) {
    b_.fail("'#" + pointer + "': " + message);
    return b_.empty();
  }

  Symbol node(const Json& n, const std::string& pointer, int depth) {
    if (!b_.ok()) return b_.empty();
    if (depth > limits_.max_nesting) return fail(pointer, "nested deeper than " + std::to_string(limits_.max_nesting));
    if (n.is_string()) return b_.literal(n.get_ref<const std::string&>());
    if (!n.is_object() || n.size() == 0) return fail(pointer, "expected a string or an object, got " + n.dump());
    const std::string kind = n.begin().key();
    if (kind == "token") {
      if (!n["token"].is_number_integer() || n["token"].get<int64_t>() < 0 || n["token"].get<int64_t>() >= (1 << 24)) {
        return fail(pointer, "'token' must be a token id");
      }
      return b_.literal(special_token_bytes(n["token"].get<int32_t>()));
    }
    if (kind == "text_without") return text_without(n, pointer);
    if (kind == "json_schema" || kind == "json_object") return json_value(n, kind, pointer);
    if (kind == "optional") return b_.optional(node(n["optional"], pointer + "/optional", depth + 1));
    if (kind != "seq" && kind != "any") return fail(pointer, "unknown node '" + kind + "'");
    const Json& items = n[kind];
    if (!items.is_array() || items.empty()) return fail(pointer, "'" + kind + "' must be a non-empty array");
    std::vector<Sequence> alternatives;
    Sequence seq;
    for (size_t i = 0; i < items.size(); ++i) {
      const Symbol s = node(items[i], pointer + "/" + kind + "/" + std::to_string(i), depth + 1);
      if (kind == "seq") seq.push_back(s);
      else alternatives.push_back({s});
    }
    if (kind == "seq") alternatives.push_back(std::move(seq));
    return b_.group(std::move(alternatives));
  }

  Symbol text_without(const Json& n, const std::string& pointer) {
    const Json& markers = n["text_without"];
    if (!markers.is_array()) return fail(pointer, "'text_without' must be an array of strings");
    std::vector<std::string> list;
    for (const Json& m : markers) {
      if (!m.is_string()) return fail(pointer, "'text_without' must be an array of strings");
      list.push_back(m.get<std::string>());
    }
    std::string not_first;
    if (n.contains("not_first")) {
      if (!n["not_first"].is_string()) return fail(pointer, "'not_first' must be a string");
      not_first = n["not_first"].get<std::string>();
    }
    auto symbol = build_text_without(b_, list, not_first);
    if (!symbol.ok()) return fail(pointer, symbol.error().message);
    return *symbol;
  }

  Symbol json_value(const Json& n, const std::string& kind, const std::string& pointer) {
    JsonSchemaOptions options = json_;
    options.lenient = n.value("lenient", false);
    auto grammar = kind == "json_object" ? compile_json_object(options, limits_)
                                         : compile_json_schema(n["json_schema"].dump(), options, warnings_, limits_);
    if (!grammar.ok()) return fail(pointer + "/" + kind, grammar.error().message);
    std::string prefix = "j";
    prefix += std::to_string(num_imported_++);
    prefix += '_';
    return import_grammar(b_, *grammar, prefix);
  }

  GrammarBuilder b_;
  JsonSchemaOptions json_;
  std::vector<std::string>* warnings_;
  GrammarLimits limits_;
  int num_imported_ = 0;
};

}  // namespace

Symbol import_grammar(GrammarBuilder& builder, const Grammar& grammar, const std::string& name_prefix) {
  std::vector<Symbol> terminals;
  for (const ByteSet& set : grammar.terminals) terminals.push_back(builder.terminal(set));
  std::vector<int32_t> rules;
  for (const Rule& rule : grammar.rules) rules.push_back(builder.declare_rule(name_prefix + rule.name));
  for (size_t r = 0; r < grammar.rules.size(); ++r) {
    std::vector<Sequence> alternatives = grammar.rules[r].alternatives;
    for (Sequence& seq : alternatives) {
      for (Symbol& s : seq) s = is_terminal(s) ? terminals[terminal_id(s)] : rules[s];
    }
    builder.set_alternatives(rules[r], std::move(alternatives));
  }
  return rules.empty() ? builder.empty() : rules[grammar.root];
}

Result<Symbol> build_text_without(GrammarBuilder& builder, const std::vector<std::string>& markers,
                                  std::string_view not_first) {
  MarkerAutomaton ac;
  std::set<uint32_t> relevant;
  std::vector<uint32_t> cps;
  for (const std::string& marker : markers) {
    if (marker.empty() || !decode_utf8(marker, cps)) return Error{"a marker must be non-empty UTF-8: '" + marker + "'"};
    ac.add(cps);
    relevant.insert(cps.begin(), cps.end());
  }
  ac.link();
  if (!decode_utf8(not_first, cps)) return Error{"'not_first' must be UTF-8"};
  const std::set<uint32_t> banned_first(cps.begin(), cps.end());

  // Transitions of each state on the marker characters (other characters lead to the root);
  // start is a state of its own, whose first character may not be in not_first.
  const int start = static_cast<int>(ac.next.size());
  std::vector<std::map<int, std::set<uint32_t>>> by_target(static_cast<size_t>(start) + 1);
  for (int p = 0; p <= start; ++p) {
    if (p != start && ac.out[p]) continue;
    for (uint32_t c : relevant) {
      if (p == start && banned_first.count(c)) continue;
      const int q = ac.step(p == start ? 0 : p, c);
      if (!ac.out[q]) by_target[p][q].insert(c);
    }
  }
  std::vector<bool> reachable(by_target.size(), false);
  std::vector<int> queue = {start, 0};
  reachable[start] = reachable[0] = true;
  for (size_t i = 0; i < queue.size(); ++i) {
    for (const auto& [q, chars] : by_target[queue[i]]) {
      if (!reachable[q]) queue.push_back(q);
      reachable[q] = true;
    }
  }
  // Rule X_q: the texts that leave the automaton in q. Left-linear (X_q ::= X_p c), so an Earley
  // set holds one completed X per position.
  std::vector<int32_t> rule(by_target.size(), -1);
  for (int q = 0; q <= start; ++q) {
    if (reachable[q]) rule[q] = builder.declare_rule(q == start ? "text_start" : "text_" + std::to_string(q));
  }
  std::vector<std::vector<Sequence>> alternatives(rule.size());
  alternatives[start].push_back({});
  for (int p = 0; p <= start; ++p) {
    if (rule[p] < 0) continue;
    for (const auto& [q, chars] : by_target[p]) {
      alternatives[q].push_back({rule[p], builder.codepoints(as_ranges(chars), false)});
    }
    std::set<uint32_t> excluded = relevant;
    if (p == start) excluded.insert(banned_first.begin(), banned_first.end());
    alternatives[0].push_back({rule[p], builder.codepoints(as_ranges(excluded), true)});
  }
  std::vector<Sequence> any_state;
  for (int q = 0; q <= start; ++q) {
    if (rule[q] < 0) continue;
    builder.set_alternatives(rule[q], std::move(alternatives[q]));
    any_state.push_back({rule[q]});
  }
  return builder.group(std::move(any_state));
}

Result<Grammar> compile_structural(std::string_view spec_json, const JsonSchemaOptions& json_options,
                                   std::vector<std::string>* warnings, GrammarLimits limits) {
  if (const int64_t depth = json_nesting_depth(spec_json); depth > kMaxJsonNesting) {
    return Error{"structural grammar: nested deeper than " + std::to_string(kMaxJsonNesting) +
                 " levels of arrays and objects (" + std::to_string(depth) + ")"};
  }
  Json spec;
  try {
    spec = Json::parse(spec_json.begin(), spec_json.end());
  } catch (const std::exception& e) {
    return Error{std::string("structural grammar: not valid JSON: ") + e.what()};
  }
  return StructuralCompiler(json_options, warnings, limits).compile(spec);
}

}  // namespace deepinfer::grammar
