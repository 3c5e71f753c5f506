// Structured output in the engine: a grammar compiler service over the tokenizer's vocabulary
// and the model's logits size, one matcher per constrained sequence, and the request fields
// (response_format, guided_*) that ask for it.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/result.h"
#include "deepinfer/sampling_params.h"
#include "grammar/compiler.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {

grammar::GrammarSpec to_grammar_spec(const StructuredOutputParams& params);

// Reads OpenAI's response_format ({"type": "json_schema", "json_schema": {"schema", "strict"}}
// or {"type": "json_object"}), the Responses API's text.format, and vLLM's guided_json,
// guided_regex, guided_grammar and guided_choice into p.structured_output. At most one may be
// given; a wrong shape is an error naming the field. structured_outputs_lenient: true (or a
// schema's "strict": false) compiles in lenient mode.
Result<void> read_structured_output(const nlohmann::json& request, SamplingParams& p);

// Not thread-safe: the engine thread drives it (prefetch runs masks on a helper thread until
// the next call that touches the same sequences joins it).
class StructuredOutputs {
 public:
  static Result<std::unique_ptr<StructuredOutputs>> create(const Tokenizer& tokenizer, int32_t logits_size,
                                                          std::vector<int32_t> stop_ids);

  // Starts compiling the grammar at admission, so the compile overlaps the prefill.
  void prepare(const StructuredOutputParams& params);
  // Starts computing the next masks of these sequences (during the forward pass).
  void prefetch(const std::vector<int64_t>& seq_ids);
  // Sets logits[id] (logits_size entries) to -inf for every token the grammar forbids. The first
  // call for a sequence waits for its compile. Errors: the compile failed, or no token fits.
  Result<void> mask(int64_t seq_id, const StructuredOutputParams& params, float* logits);
  // Advances the sequence by its sampled token; true when the grammar is complete and nothing
  // may follow (the sequence must stop).
  bool accept(int64_t seq_id, int32_t token);
  void remove(int64_t seq_id);

 private:
  struct Sequence {
    std::unique_ptr<grammar::GrammarMatcher> matcher;
    std::vector<uint32_t> mask;
    bool mask_ready = false;
    bool mask_ok = false;
  };
  StructuredOutputs(std::shared_ptr<const grammar::TokenVocab> vocab);
  void join_prefetch();

  std::shared_ptr<const grammar::TokenVocab> vocab_;
  grammar::GrammarCompilerService service_;
  std::unordered_map<int64_t, Sequence> sequences_;
  std::future<void> prefetch_;
};

}  // namespace deepinfer
