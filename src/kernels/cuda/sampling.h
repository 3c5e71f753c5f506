// sample_rows (kernels/ops.h) on the GPU: the host sampler's choices from logits that stay on the
// device, so a decode step returns token ids only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/ops.h"

namespace deepinfer::kernels::cuda {

// Bytes of workspace sample_rows needs: candidate lists and a row of probabilities for each block
// that runs at once.
size_t sample_rows_workspace_bytes(int64_t vocab, int64_t num_draws, int32_t num_sms);

// One block per draw (at most num_sms blocks, each taking draws in turn). logits, params,
// token_ids and workspace are device memory.
void sample_rows(const float* logits, int64_t vocab, const SampleParams* params, int64_t num_draws,
                 int32_t* token_ids, void* workspace, int32_t num_sms, cudaStream_t stream);

}  // namespace deepinfer::kernels::cuda
