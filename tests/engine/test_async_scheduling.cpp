// The pipelined step loop against the synchronous one on the host backend
// (tests/engine/async_scheduling_cases.h has the cases).
#include "async_scheduling_cases.h"

namespace deepinfer::testing {
namespace {

TestModel invariant_llama() { return load_test_model("llama", /*batch_invariant=*/true); }

TEST(AsyncScheduling, SameTokensAsTheSynchronousLoop) {
  async_cases::same_tokens_as_the_synchronous_loop(*invariant_llama().model);
}

TEST(AsyncScheduling, MoreRequestsThanSeats) {
  async_cases::more_requests_than_seats(*invariant_llama().model);
}

TEST(AsyncScheduling, ArrivalsJoinWhileStepsRun) {
  async_cases::arrivals_join_while_steps_run(*invariant_llama().model);
}

TEST(AsyncScheduling, HostSampledRowsSitOutWhileOthersPipeline) {
  async_cases::host_sampled_rows_sit_out_while_others_pipeline(*invariant_llama().model);
}

TEST(AsyncScheduling, AbortsAtEveryStepOffset) {
  async_cases::aborts_at_every_step_offset(*invariant_llama().model);
}

TEST(AsyncScheduling, PreemptionUnderATinyKvPool) {
  async_cases::preemption_under_a_tiny_kv_pool(*invariant_llama().model);
}

TEST(AsyncScheduling, StopStringsAndTextThroughTheLlm) {
  async_cases::stop_strings_and_text_through_the_llm("cpu");
}

TEST(AsyncScheduling, GrammarRequestAmongFreeOnes) {
  async_cases::grammar_request_among_free_ones("cpu");
}

}  // namespace
}  // namespace deepinfer::testing
