// StructuredOutputs: compile at admission, mask before sampling, advance after it; and the
// request fields that select a grammar.
#include "engine/structured_output.h"

#include <cmath>
#include <limits>

#include "core/check.h"

namespace deepinfer {

namespace {

using nlohmann::json;
using Kind = StructuredOutputParams::Kind;

Error wrong_shape(const std::string& field, const char* expected) {
  return Error{"field '" + field + "' must be " + expected};
}

// {"schema": {...}, "strict": bool}, as in response_format.json_schema and text.format.
Result<StructuredOutputParams> schema_format(const json& holder, const std::string& field) {
  StructuredOutputParams s;
  s.kind = Kind::kJsonSchema;
  if (!holder.contains("schema")) return wrong_shape(field, "an object with a 'schema'");
  const json& schema = holder["schema"];
  if (!schema.is_object() && !schema.is_boolean()) return wrong_shape(field + ".schema", "a JSON Schema object");
  s.spec = schema.dump();
  if (holder.contains("strict") && !holder["strict"].is_null()) {
    if (!holder["strict"].is_boolean()) return wrong_shape(field + ".strict", "a boolean");
    s.strict = holder["strict"].get<bool>();
  }
  return s;
}

// A response_format / text.format object; nullopt for {"type": "text"}.
Result<std::optional<StructuredOutputParams>> format_field(const json& format, const std::string& field) {
  if (!format.is_object() || !format.contains("type") || !format["type"].is_string()) {
    return wrong_shape(field, "an object with a string 'type'");
  }
  const std::string type = format["type"].get<std::string>();
  if (type == "text") return std::optional<StructuredOutputParams>();
  if (type == "json_object") return std::optional<StructuredOutputParams>(StructuredOutputParams{});
  if (type != "json_schema") return Error{"field '" + field + ".type' must be text, json_object or json_schema"};
  // Chat completions nest the schema under "json_schema"; the Responses API puts it inline.
  auto s = schema_format(format.contains("json_schema") ? format["json_schema"] : format,
                         format.contains("json_schema") ? field + ".json_schema" : field);
  if (!s.ok()) return s.error();
  return std::optional<StructuredOutputParams>(std::move(s).value());
}

}  // namespace

grammar::GrammarSpec to_grammar_spec(const StructuredOutputParams& params) {
  grammar::GrammarSpec spec;
  spec.text = params.spec;
  spec.choices = params.choices;
  spec.json.lenient = !params.strict;
  spec.json.max_whitespace = params.max_whitespace;
  switch (params.kind) {
    case Kind::kJsonSchema: spec.kind = grammar::GrammarSpec::Kind::kJsonSchema; break;
    case Kind::kJsonObject: spec.kind = grammar::GrammarSpec::Kind::kJsonObject; break;
    case Kind::kRegex: spec.kind = grammar::GrammarSpec::Kind::kRegex; break;
    case Kind::kGrammar: spec.kind = grammar::GrammarSpec::Kind::kEbnf; break;
    case Kind::kChoice: spec.kind = grammar::GrammarSpec::Kind::kChoice; break;
    case Kind::kStructural: spec.kind = grammar::GrammarSpec::Kind::kStructural; break;
  }
  return spec;
}

Result<void> read_structured_output(const json& request, SamplingParams& p) {
  std::vector<StructuredOutputParams> found;
  if (request.contains("response_format") && !request["response_format"].is_null()) {
    auto s = format_field(request["response_format"], "response_format");
    if (!s.ok()) return s.error();
    if (*s) found.push_back(**s);
  }
  if (request.contains("text") && request["text"].is_object() && request["text"].contains("format")) {
    auto s = format_field(request["text"]["format"], "text.format");
    if (!s.ok()) return s.error();
    if (*s) found.push_back(**s);
  }
  if (request.contains("guided_json") && !request["guided_json"].is_null()) {
    const json& g = request["guided_json"];
    StructuredOutputParams s;
    s.kind = Kind::kJsonSchema;
    if (g.is_string()) {
      s.spec = g.get<std::string>();
    } else if (g.is_object()) {
      s.spec = g.dump();
    } else {
      return wrong_shape("guided_json", "a JSON Schema (object or string)");
    }
    found.push_back(std::move(s));
  }
  for (const auto& [field, kind] : {std::pair{"guided_regex", Kind::kRegex}, std::pair{"guided_grammar", Kind::kGrammar}}) {
    if (!request.contains(field) || request[field].is_null()) continue;
    if (!request[field].is_string()) return wrong_shape(field, "a string");
    StructuredOutputParams s;
    s.kind = kind;
    s.spec = request[field].get<std::string>();
    found.push_back(std::move(s));
  }
  if (request.contains("guided_choice") && !request["guided_choice"].is_null()) {
    const json& g = request["guided_choice"];
    StructuredOutputParams s;
    s.kind = Kind::kChoice;
    if (!g.is_array() || g.empty()) return wrong_shape("guided_choice", "a non-empty list of strings");
    for (const json& c : g) {
      if (!c.is_string()) return wrong_shape("guided_choice", "a non-empty list of strings");
      s.choices.push_back(c.get<std::string>());
    }
    found.push_back(std::move(s));
  }
  if (found.size() > 1) {
    return Error{"give at most one of response_format, text.format, guided_json, guided_regex, guided_grammar, "
                 "guided_choice"};
  }
  if (request.contains("structured_outputs_lenient") && !request["structured_outputs_lenient"].is_null()) {
    if (!request["structured_outputs_lenient"].is_boolean()) {
      return wrong_shape("structured_outputs_lenient", "a boolean");
    }
    // Drops what the engine cannot enforce (with warnings) instead of failing the request.
    if (request["structured_outputs_lenient"].get<bool>() && !found.empty()) found[0].strict = false;
  }
  if (!found.empty()) p.structured_output = std::move(found[0]);
  return {};
}

Result<std::unique_ptr<StructuredOutputs>> StructuredOutputs::create(
    const Tokenizer& tokenizer, int32_t logits_size, std::vector<int32_t> stop_ids,
    const grammar::GrammarCompilerService::Options& options) {
  auto vocab = grammar::TokenVocab::from_tokenizer(tokenizer, logits_size, std::move(stop_ids));
  if (!vocab.ok()) return vocab.error();
  return std::unique_ptr<StructuredOutputs>(
      new StructuredOutputs(std::make_shared<const grammar::TokenVocab>(std::move(vocab).value()), options));
}

StructuredOutputs::StructuredOutputs(std::shared_ptr<const grammar::TokenVocab> vocab,
                                     const grammar::GrammarCompilerService::Options& options)
    : vocab_(vocab), service_(vocab, options) {}

void StructuredOutputs::prepare(int64_t seq_id, const StructuredOutputParams& params) {
  sequences_[seq_id].compile = service_.compile(to_grammar_spec(params));
}

Result<bool> StructuredOutputs::try_start(int64_t seq_id, std::span<const int32_t> tokens) {
  Sequence& seq = sequences_.at(seq_id);
  if (seq.matcher) return true;
  const auto& result = seq.compile.result;
  if (result.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return false;
  const grammar::CompileResult& compiled = result.get();
  if (!compiled.ok()) return compiled.error();
  auto matcher = std::make_unique<grammar::GrammarMatcher>(*compiled);
  // A prefilled request arrives with its first token, sampled under this grammar elsewhere.
  for (int32_t token : tokens) {
    if (!matcher->accept_token(token)) return Error{"token " + std::to_string(token) + " does not match the grammar"};
  }
  seq.matcher = std::move(matcher);
  seq.mask.resize(static_cast<size_t>(vocab_->num_mask_words()));
  return true;
}

void StructuredOutputs::wait_for_compiles(std::chrono::milliseconds timeout) {
  for (const auto& [id, seq] : sequences_) {
    if (!seq.matcher) {
      seq.compile.result.wait_for(timeout);
      return;
    }
  }
}

void StructuredOutputs::join_prefetch() {
  if (prefetch_.valid()) prefetch_.get();
}

void StructuredOutputs::prefetch(const std::vector<int64_t>& seq_ids) {
  join_prefetch();
  std::vector<Sequence*> ready;
  for (int64_t id : seq_ids) {
    auto found = sequences_.find(id);
    if (found != sequences_.end() && found->second.matcher && !found->second.mask_ready) ready.push_back(&found->second);
  }
  if (ready.empty()) return;
  prefetch_ = prefetch_pool_.submit([ready] {
    for (Sequence* seq : ready) {
      seq->mask_ok = seq->matcher->fill_next_token_bitmask(seq->mask.data());
      seq->mask_ready = true;
    }
  });
}

Result<void> StructuredOutputs::mask(int64_t seq_id, float* logits) {
  join_prefetch();
  // A forked sample's first mask: its grammar is the one its sample 0 was started with.
  auto started = try_start(seq_id, {});
  if (!started.ok()) return Error{"structured output: " + started.error().message};
  DI_CHECK(*started, "sequence " << seq_id << " sampled before its grammar compiled");
  Sequence& seq = sequences_.at(seq_id);
  if (!seq.mask_ready) seq.mask_ok = seq.matcher->fill_next_token_bitmask(seq.mask.data());
  seq.mask_ready = false;
  if (!seq.mask_ok) return Error{"structured output: " + seq.matcher->error()};
  constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
  for (int32_t id = 0; id < vocab_->mask_size(); ++id) {
    if (!((seq.mask[static_cast<size_t>(id >> 5)] >> (id & 31)) & 1)) logits[id] = kMinusInf;
  }
  return {};
}

bool StructuredOutputs::accept(int64_t seq_id, int32_t token) {
  join_prefetch();
  auto found = sequences_.find(seq_id);
  // A prefilled request's first token comes before its matcher, which try_start then feeds it.
  if (found == sequences_.end() || !found->second.matcher) return false;
  Sequence& seq = found->second;
  seq.mask_ready = false;
  // The token came from a masked row, so the matcher accepts it; a refusal would mean the mask
  // and the matcher disagree, which the grammar tests rule out.
  if (!seq.matcher->accept_token(token)) return true;
  return seq.matcher->must_end();
}

int32_t StructuredOutputs::valid_prefix(int64_t seq_id, std::span<const int32_t> tokens) {
  join_prefetch();
  auto found = sequences_.find(seq_id);
  if (found == sequences_.end() || !found->second.matcher) return 0;
  grammar::GrammarMatcher& matcher = *found->second.matcher;
  int32_t accepted = 0;
  while (static_cast<size_t>(accepted) < tokens.size() && !matcher.is_terminated() &&
         matcher.accept_token(tokens[static_cast<size_t>(accepted)])) {
    ++accepted;
  }
  matcher.rollback(accepted);  // back to the state the next mask is for
  return accepted;
}

void StructuredOutputs::remove(int64_t seq_id) {
  join_prefetch();
  auto found = sequences_.find(seq_id);
  if (found == sequences_.end()) return;
  const grammar::GrammarCompilerService::Handle compile = found->second.compile;
  sequences_.erase(found);
  // Requests with the same spec share one compile: it stops only when none waits for it.
  for (const auto& [id, seq] : sequences_) {
    if (seq.compile.cancelled == compile.cancelled) return;
  }
  service_.cancel(compile);
}

}  // namespace deepinfer
