// A PROMPT engine streaming a prefill's KV on the GPU (PrefillHandover::kStream): each layer's
// blocks leave through asynchronous copies behind that layer's kernels, handed over one layer
// later; the checks of prefill_kv_stream_cases.h on bf16 models (GQA, sliding-window and MLA),
// with the steps enqueued from the engine's thread as the default CUDA loop runs them.
#include "../engine/prefill_kv_stream_cases.h"
#include "bf16_model.h"
#include "cuda_test_util.h"

namespace deepinfer::testing {
namespace {

class CudaPrefillKvStream : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaPrefillKvStream, PiecesAreTheCopiedHandoverAndLeaveBeforeTheFirstToken) {
  const std::string dir = write_bf16_copy(fixture_dir(GetParam()), GetParam());
  CudaModel copying = load_on_cuda(dir, /*batch_invariant=*/true);
  CudaModel streaming = load_on_cuda(dir, /*batch_invariant=*/true);
  prefill_kv_stream::expect_stream_equals_copy(*copying.model, *streaming.model, /*async_scheduling=*/true);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaPrefillKvStream, ::testing::Values("llama", "gemma3", "deepseek_v2"));

}  // namespace
}  // namespace deepinfer::testing
