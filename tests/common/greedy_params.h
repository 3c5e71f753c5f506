// Sampling settings the engine and server tests run requests with: greedy, a fixed number of
// tokens whatever the model emits (EOS ignored), so each run's output length is known.
#pragma once

#include <cstdint>

#include "deepinfer/sampling_params.h"

namespace deepinfer::testing {

inline SamplingParams greedy_params(int32_t max_tokens) {
  SamplingParams params;
  params.temperature = 0.0;
  params.max_tokens = max_tokens;
  params.ignore_eos = true;
  return params;
}

}  // namespace deepinfer::testing
