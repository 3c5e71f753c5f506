// Log-probabilities for the API's logprobs / top_logprobs / prompt_logprobs, in float64.
// Which logits to pass is the caller's choice; the engine passes the model's raw logits (before
// penalties, logit bias, temperature and top-k/top-p/min-p), as vLLM does by default
// (logprobs_mode "raw_logprobs"), so a token's logprob does not depend on the sampling settings.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace deepinfer {

// One position's answer: the chosen token's logprob and the top_k most likely tokens.
struct TokenLogprob {
  int32_t token_id = 0;
  double logprob = 0.0;
  // The top_k most likely (token id, logprob), logprob descending, ids ascending among ties. The
  // chosen token appears here only if it is among them.
  std::vector<std::pair<int32_t, double>> top;
};

// logits: [vocab_size] f32, at least one finite. For a generated token, the row that produced it;
// for prompt token i (i >= 1), the row of position i - 1. top_k in [0, vocab_size] (clamped above).
TokenLogprob token_logprob(const float* logits, int64_t vocab_size, int32_t chosen, int32_t top_k);

// log_softmax over the full vocabulary: [vocab_size] f64.
std::vector<double> log_softmax(const float* logits, int64_t vocab_size);

// The k most likely (id, logprob) pairs, ordered as TokenLogprob::top.
std::vector<std::pair<int32_t, double>> top_logprobs(const float* logits, int64_t vocab_size, int32_t k);

// KL(P || Q) in float64, P and Q the softmax over the full vocabulary of reference_logits and
// logits: how far logits' distribution is from the reference's, in nats (llama.cpp's KLD).
double kl_divergence(const float* reference_logits, const float* logits, int64_t vocab_size);

// The entropy of logits' softmax over the full vocabulary, in nats (ln vocab_size when flat): what a
// KL divergence is small against.
double entropy(const float* logits, int64_t vocab_size);

}  // namespace deepinfer
