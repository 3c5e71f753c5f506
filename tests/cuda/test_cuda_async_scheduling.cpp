// The pipelined step loop against the synchronous one on CUDA, the cases of
// tests/engine/async_scheduling_cases.h: steps enqueued behind the running one, input tokens taken
// from its draws on the device, readbacks waited on by their own events, decode graphs replayed.
// The bf16 copy of the llama fixture on the batch-invariant CUDA backend; the text model through
// the LLM API with device "cuda".
#include "../engine/async_scheduling_cases.h"
#include "bf16_model.h"
#include "cuda_test_util.h"

namespace deepinfer::testing {
namespace {

CudaModel invariant_llama_on_cuda() {
  return load_on_cuda(write_bf16_copy(fixture_dir("llama"), "llama"), /*batch_invariant=*/true);
}

TEST(CudaAsyncScheduling, SameTokensAsTheSynchronousLoop) {
  CudaModel loaded = invariant_llama_on_cuda();
  async_cases::same_tokens_as_the_synchronous_loop(*loaded.model);
  EXPECT_GT(loaded.model->num_graph_replays(), 0);
}

TEST(CudaAsyncScheduling, MoreRequestsThanSeats) {
  async_cases::more_requests_than_seats(*invariant_llama_on_cuda().model);
}

TEST(CudaAsyncScheduling, ArrivalsJoinWhileStepsRun) {
  async_cases::arrivals_join_while_steps_run(*invariant_llama_on_cuda().model);
}

TEST(CudaAsyncScheduling, HostSampledRowsSitOutWhileOthersPipeline) {
  async_cases::host_sampled_rows_sit_out_while_others_pipeline(*invariant_llama_on_cuda().model);
}

TEST(CudaAsyncScheduling, AbortsAtEveryStepOffset) {
  async_cases::aborts_at_every_step_offset(*invariant_llama_on_cuda().model);
}

TEST(CudaAsyncScheduling, PreemptionUnderATinyKvPool) {
  async_cases::preemption_under_a_tiny_kv_pool(*invariant_llama_on_cuda().model);
}

TEST(CudaAsyncScheduling, StopStringsAndTextThroughTheLlm) { async_cases::stop_strings_and_text_through_the_llm("cuda"); }

TEST(CudaAsyncScheduling, GrammarRequestAmongFreeOnes) { async_cases::grammar_request_among_free_ones("cuda"); }

}  // namespace
}  // namespace deepinfer::testing
