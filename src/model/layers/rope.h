// Rotary position embedding tables for every rope variant transformers defines for our models:
// the inverse frequencies and the attention scaling that the rope kernel consumes.
#pragma once

#include <cstdint>
#include <vector>

#include "core/result.h"
#include "weights/hf_config.h"

namespace deepinfer {

struct RopeTable {
  std::vector<float> inv_freq;  // [rotary_dim / 2]
  float attention_scaling = 1.0f;
  int32_t rotary_dim = 0;
  // M-RoPE: which of the token's positions each of inv_freq's entries takes, 0 (temporal), 1
  // (height) or 2 (width), from RopeConfig::mrope_section, consecutive or interleaved; empty:
  // every entry takes the token's one position.
  std::vector<int8_t> mrope_axis;
};

// Follows transformers' rope init functions (default, linear, llama3, yarn) in float64 and
// rounds the result to float32. Errors for rope types whose frequencies change with sequence
// length (dynamic), naming the type.
Result<RopeTable> make_rope_table(const RopeConfig& rope, int64_t head_dim, int64_t max_position_embeddings);

}  // namespace deepinfer
