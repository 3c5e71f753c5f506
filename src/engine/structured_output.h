// Structured output in the engine: a grammar compiler service over the tokenizer's vocabulary
// and the model's logits size, one matcher per constrained sequence, and the request fields
// (response_format, guided_*) that ask for it.
#pragma once

#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <span>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/result.h"
#include "core/thread_pool.h"
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

// Not thread-safe: the engine thread drives it. Grammars compile on the compiler service's pool
// and masks are prefetched on a thread of its own, so no call waits on a compile except
// wait_for_compiles, which the engine makes only when it has nothing else to run.
class StructuredOutputs {
 public:
  static Result<std::unique_ptr<StructuredOutputs>> create(const Tokenizer& tokenizer, int32_t logits_size,
                                                          std::vector<int32_t> stop_ids,
                                                          const grammar::GrammarCompilerService::Options& options);

  // Starts compiling seq_id's grammar (at admission, so the compile overlaps the prefill).
  void prepare(int64_t seq_id, const StructuredOutputParams& params);
  // Whether seq_id's grammar is compiled, without waiting: false while it compiles; true once its
  // matcher is made and has accepted tokens (those the sequence already has); an error when the
  // compile failed, timed out or was cancelled.
  Result<bool> try_start(int64_t seq_id, std::span<const int32_t> tokens);
  // Waits until one of the compiles still running finishes, at most timeout.
  void wait_for_compiles(std::chrono::milliseconds timeout);
  // Starts computing the next masks of these sequences (during the forward pass).
  void prefetch(const std::vector<int64_t>& seq_ids);
  // Sets logits[id] (logits_size entries) to -inf for every token the grammar forbids. The
  // grammar must be compiled (try_start). Errors: no token fits, or the grammar got too complex.
  Result<void> mask(int64_t seq_id, float* logits);
  // Advances the sequence by its sampled token; true when the grammar is complete and nothing
  // may follow (the sequence must stop).
  bool accept(int64_t seq_id, int32_t token);
  // How many leading tokens the grammar would accept after the sequence's own (speculative
  // decoding: a draft it rejects ends the chain), leaving the sequence where it was. 0 while the
  // grammar compiles.
  int32_t valid_prefix(int64_t seq_id, std::span<const int32_t> tokens);
  // Forgets the sequence; a compile that no other sequence waits for is cancelled.
  void remove(int64_t seq_id);

 private:
  struct Sequence {
    grammar::GrammarCompilerService::Handle compile;
    std::unique_ptr<grammar::GrammarMatcher> matcher;  // once the compile succeeded
    std::vector<uint32_t> mask;
    bool mask_ready = false;
    bool mask_ok = false;
  };
  StructuredOutputs(std::shared_ptr<const grammar::TokenVocab> vocab,
                    const grammar::GrammarCompilerService::Options& options);
  void join_prefetch();

  std::shared_ptr<const grammar::TokenVocab> vocab_;
  grammar::GrammarCompilerService service_;
  std::unordered_map<int64_t, Sequence> sequences_;
  ThreadPool prefetch_pool_{1};  // its task reads sequences_: declared after it, joined first
  std::future<void> prefetch_;
};

}  // namespace deepinfer
