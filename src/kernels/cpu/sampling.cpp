// sample_rows on the host: the reference sampler, one draw per thread (each draw is sequential
// over the vocabulary, and the draws of a batch are independent).
#include <exception>

#include "kernels/ops.h"

namespace deepinfer::kernels::cpu {

void sample_rows(const float* logits, int64_t vocab, const SampleParams* params, int64_t num_draws,
                 int32_t* token_ids) {
  // A failed check must not escape an OpenMP thread: the first one is rethrown here.
  std::exception_ptr error;
#pragma omp parallel for schedule(dynamic) if (num_draws > 1)
  for (int64_t i = 0; i < num_draws; ++i) {
    try {
      ref::sample_rows(logits, vocab, params + i, 1, token_ids + i);
    } catch (...) {
#pragma omp critical(deepinfer_sample_rows_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

void gather_rows(const int32_t* src, const int32_t* row_of, int64_t num_rows, int64_t width, int32_t* dst) {
  ref::gather_rows(src, row_of, num_rows, width, dst);
}

}  // namespace deepinfer::kernels::cpu
