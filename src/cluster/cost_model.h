// The time an instance takes for a prefill chunk, a decode step and a KV load from the shared
// store, as closed forms fitted to the engine's measurements. The defaults are the Llama-3-8B shape
// (bf16 weights and KV) on one H200, `deepinfer bench --device cuda`, 2026-12-02
// (docs/bench/cuda_dense_2026-12-02.jsonl; docs/cluster.md shows the fits).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/result.h"

namespace deepinfer {

struct CostModel {
  // Prefill of n new tokens after p tokens already in the cache, in one forward:
  //   step_overhead + per_token * n + attention_per_token_pair * n * (p + n / 2)
  // Overhead: the b=1 decode step (reading the weights once, 4.215 ms); the two coefficients solve
  // the 4096- and 32768-token prefills (118.1 ms and 1698.7 ms) after the overhead.
  double prefill_step_overhead_ms = 4.215;
  double prefill_per_token_ms = 0.0243887;
  double prefill_attention_per_token_pair_ms = 1.66766e-6;
  // A decode step of a batch whose requests hold context_tokens of KV in all:
  //   step_overhead + per_request * batch + per_context_token * context_tokens
  // Least squares over the eight decode points (b = 1, 8, 64, 256 x context 1K, 8K).
  double decode_step_overhead_ms = 4.974;
  double decode_per_request_ms = 0.018413;
  double decode_per_context_token_ms = 2.8784e-5;
  // Loading cached KV from the shared store: 128 KiB a token (bf16) at the store -> GPU rate measured
  // with verification beside the upload, 22.2 GB/s (docs/benchmarks.md, persistent KV store).
  double store_load_per_token_ms = 0.0059041;

  // The compute of n new tokens after prior_tokens, without the step overhead.
  double prefill_tokens_ms(int64_t new_tokens, int64_t prior_tokens) const;
  // A whole prefill in one forward: the overhead plus prefill_tokens_ms.
  double prefill_ms(int64_t new_tokens, int64_t prior_tokens) const;
  double decode_step_ms(int64_t batch, int64_t context_tokens) const;
  double store_load_ms(int64_t tokens) const { return store_load_per_token_ms * static_cast<double>(tokens); }
  // The most new tokens after prior_tokens whose compute (no overhead) fits budget_ms; 0 if none.
  int64_t max_tokens_within(double budget_ms, int64_t prior_tokens) const;

  nlohmann::json to_json() const;
  // The defaults with the fields a JSON object names replaced; an unknown or non-numeric field is
  // an error naming it.
  static Result<CostModel> from_json(const nlohmann::json& overrides);
  static Result<CostModel> from_json_file(const std::string& path);
};

}  // namespace deepinfer
