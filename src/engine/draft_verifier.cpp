// DraftVerifier: draft, verify, keep, catch up.
#include "engine/draft_verifier.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "core/check.h"
#include "core/clock.h"
#include "sampling/sampler.h"

namespace deepinfer {
DraftVerifier::DraftVerifier(CausalLM& model, int32_t max_seq_tokens, int32_t block_size)
    : model_(model),
      block_size_(block_size),
      num_blocks_((max_seq_tokens + block_size - 1) / block_size),
      max_seq_tokens_(max_seq_tokens) {
  DI_CHECK(block_size > 0 && max_seq_tokens > 0);
  model_.allocate_kv_cache(KvCacheShape{num_blocks_, block_size_, 0});
}

Result<std::vector<int32_t>> DraftVerifier::generate(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                                                     int32_t num_drafts, DraftStats* stats,
                                                     const DraftReplay* replay) {
  if (replay == nullptr && model_.num_draft_modules() == 0) {
    return Error{"the model has no draft module (speculative decoding needs an MTP layer: num_nextn_predict_layers)"};
  }
  DI_TRY(options.sampling.validate(model_.config().vocab_size));
  if (prompt.empty()) return Error{"the prompt is empty; give at least one token"};
  if (options.max_tokens < 0) return Error{"max_tokens must be >= 0"};
  const int32_t max_tokens = options.max_tokens;
  if (num_drafts < 1) return Error{"num_drafts must be >= 1"};
  if (static_cast<int64_t>(prompt.size()) + max_tokens + num_drafts > max_seq_tokens_) {
    return Error{"prompt, max_tokens and drafts need " +
                 std::to_string(static_cast<int64_t>(prompt.size()) + max_tokens + num_drafts) +
                 " positions; this verifier holds " + std::to_string(max_seq_tokens_)};
  }
  if (max_tokens == 0) return std::vector<int32_t>{};
  const int64_t vocab = model_.config().vocab_size;
  std::vector<int32_t> stop_ids = options.stop_token_ids;
  if (!options.ignore_eos) {
    for (int64_t id : model_.config().eos_token_ids) stop_ids.push_back(static_cast<int32_t>(id));
  }
  const uint64_t seed = options.sampling.seed.value_or(0);
  // The main model's choice for the token at position (the index it will have), from its logits.
  const auto choose = [&](const float* row, size_t position) {
    return sample_token(row, vocab, options.sampling, seed, static_cast<int64_t>(position), 0);
  };
  if (stats->depths.size() < static_cast<size_t>(num_drafts)) stats->depths.resize(static_cast<size_t>(num_drafts));
  if (stats->accepted_per_round.size() < static_cast<size_t>(num_drafts + 1)) {
    stats->accepted_per_round.resize(static_cast<size_t>(num_drafts + 1), 0);
  }

  // tokens: the sequence; the main model has run positions [0, tokens.size() - 1), the draft
  // module its own cache over [0, draft_end) with the true tokens.
  std::vector<int32_t> tokens = prompt;
  const auto prompt_len = static_cast<int32_t>(prompt.size());
  std::vector<float> logits(static_cast<size_t>(prompt_len) * static_cast<size_t>(vocab));
  model_.forward(contiguous_sequence_batch(prompt, 0, num_blocks_), logits.data());
  tokens.push_back(choose(logits.data() + static_cast<size_t>(prompt_len - 1) * static_cast<size_t>(vocab),
                          tokens.size()));
  // The main rows of the last forward: position first_main_row + r is row r.
  int32_t first_main_row = 0;
  int32_t draft_end = 0;
  int32_t draft = 0;
  float confidence = 0.0f;
  const auto done = [&] {
    const auto generated = static_cast<int32_t>(tokens.size()) - prompt_len;
    return generated >= max_tokens ||
           (generated > 0 && std::find(stop_ids.begin(), stop_ids.end(), tokens.back()) != stop_ids.end());
  };
  while (!done()) {
    const auto last = static_cast<int32_t>(tokens.size()) - 1;  // the main model has not run it
    const int32_t budget = std::min(num_drafts, max_tokens - (last + 1 - prompt_len));
    std::vector<int32_t> drafts;
    std::vector<float> confidences;
    auto start = std::chrono::steady_clock::now();
    if (replay != nullptr) {
      for (int32_t j = 0; j < budget; ++j) {
        const auto position = static_cast<size_t>(last + 1 + j);
        const size_t generated = position - static_cast<size_t>(prompt_len);
        if (generated >= replay->tokens.size()) break;
        int32_t draft = replay->tokens[generated];
        if (deterministic_uniform(replay->seed, static_cast<int64_t>(position)) < replay->corrupt_rate) {
          draft = static_cast<int32_t>((draft + 1) % vocab);
        }
        drafts.push_back(draft);
        confidences.push_back(static_cast<float>(1.0 - replay->corrupt_rate));
      }
    } else {
      // Catch up: the draft module's rows for the positions whose next token is now known, the
      // last of them drafting the first token past the sequence.
      std::vector<int32_t> next(tokens.begin() + draft_end + 1, tokens.end());
      std::vector<int32_t> hidden_rows;
      for (int32_t p = draft_end; p < last; ++p) hidden_rows.push_back(p - first_main_row);
      ForwardBatch catch_up = contiguous_sequence_batch(next, draft_end, num_blocks_);
      catch_up.logit_rows = {static_cast<int32_t>(next.size()) - 1};
      model_.forward_draft(catch_up, hidden_rows, CausalLM::DraftInput::kMainHidden, {nullptr, &draft, &confidence});
      ++stats->draft_forwards;
      draft_end = last;
      drafts.push_back(draft);
      confidences.push_back(confidence);
      auto output_row = static_cast<int32_t>(next.size()) - 1;  // of the last forward_draft
      // Deeper drafts: the module again on its own output and the draft before, one position on.
      while (static_cast<int32_t>(drafts.size()) < budget) {
        const int32_t position = last + static_cast<int32_t>(drafts.size()) - 1;
        ForwardBatch chain = contiguous_sequence_batch({drafts.back()}, position, num_blocks_);
        model_.forward_draft(chain, {output_row}, CausalLM::DraftInput::kDraftOutput, {nullptr, &draft, &confidence});
        output_row = 0;
        ++stats->draft_forwards;
        drafts.push_back(draft);
        confidences.push_back(confidence);
      }
    }
    stats->draft_seconds += seconds_since(start);
    // Verify: the last token and the drafts in one forward; keep the drafts up to the first the
    // main model disagrees with, then its own token there.
    std::vector<int32_t> verify = {tokens.back()};
    verify.insert(verify.end(), drafts.begin(), drafts.end());
    logits.resize(verify.size() * static_cast<size_t>(vocab));
    start = std::chrono::steady_clock::now();
    model_.forward(contiguous_sequence_batch(verify, last, num_blocks_), logits.data());
    stats->verify_seconds += seconds_since(start);
    ++stats->rounds;
    first_main_row = last;
    size_t accepted = 0;
    for (size_t d = 0; d <= drafts.size(); ++d) {
      const int32_t target = choose(logits.data() + d * static_cast<size_t>(vocab), tokens.size());
      const bool match = d < drafts.size() && drafts[d] == target;
      if (d < drafts.size()) {
        stats->depths[d].confidence.push_back(confidences[d]);
        stats->depths[d].accepted.push_back(match ? 1 : 0);
      }
      tokens.push_back(target);
      if (match) ++accepted;
      if (!match || done()) break;
    }
    ++stats->accepted_per_round[accepted];
  }
  std::vector<int32_t> generated(tokens.begin() + prompt_len, tokens.end());
  if (static_cast<int32_t>(generated.size()) > max_tokens) generated.resize(static_cast<size_t>(max_tokens));
  return generated;
}

}  // namespace deepinfer
