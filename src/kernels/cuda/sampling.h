// sample_rows (kernels/ops.h) on the GPU: the host sampler's choices from logits that stay on the
// device, so a decode step returns token ids only (gather_rows in copy_pieces.h feeds them to the
// step scheduled after it).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/ops.h"

namespace deepinfer::kernels::cuda {

// Bytes of workspace sample_rows needs: the split launches' counters, then candidate lists and a
// row of probabilities for each block that runs at once (or each split draw).
size_t sample_rows_workspace_bytes(int64_t vocab, int64_t num_draws, int32_t num_sms);

// Readies a newly allocated workspace (zeroes the counters that every call leaves at zero).
void clear_sample_rows_workspace(void* workspace, cudaStream_t stream);

// One block per draw (at most num_sms blocks, each taking draws in turn), or at small batches
// several blocks per row. logits, params, token_ids and workspace are device memory; the
// workspace was readied by clear_sample_rows_workspace.
void sample_rows(const float* logits, int64_t vocab, const SampleParams* params, int64_t num_draws,
                 int32_t* token_ids, void* workspace, int32_t num_sms, cudaStream_t stream);

}  // namespace deepinfer::kernels::cuda
