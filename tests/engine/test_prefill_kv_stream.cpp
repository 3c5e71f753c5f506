// A PROMPT engine that streams a prefill's KV (PrefillHandover::kStream) on the CPU: the checks of
// prefill_kv_stream_cases.h on a full-attention model, sliding-window models (the sliding layers
// only from the window's first block) and MLA; and who may stream.
#include "prefill_kv_stream_cases.h"

namespace deepinfer::testing {
namespace {

using namespace prefill_kv_stream;

class PrefillKvStream : public ::testing::TestWithParam<std::string> {};

TEST_P(PrefillKvStream, PiecesAreTheCopiedHandoverAndLeaveBeforeTheFirstToken) {
  TestModel copying = load_test_model(GetParam(), true);
  TestModel streaming = load_test_model(GetParam(), true);
  expect_stream_equals_copy(*copying.model, *streaming.model);
}

TEST_P(PrefillKvStream, OnlyAPromptEngineStreamsAndOnlyIntoASink) {
  TestModel m = load_test_model(GetParam(), true);
  EngineCore prompt_engine(*m.model, nullptr, prompt_config());
  const Result<void> no_sink =
      prompt_engine.add_request(0, prompt(), greedy(), 0, "", TrafficClass::kDefault, PrefillHandover::kStream);
  ASSERT_FALSE(no_sink.ok());
  EXPECT_NE(no_sink.error().message.find("needs a sink"), std::string::npos) << no_sink.error().message;
  EngineCore normal_engine(*m.model, nullptr, small_engine_config(64, kBlock));
  const Result<void> normal = normal_engine.add_request(0, prompt(), greedy(), 0, "", TrafficClass::kDefault,
                                                        PrefillHandover::kStream, std::make_shared<RecordingSink>());
  ASSERT_FALSE(normal.ok());
  EXPECT_NE(normal.error().message.find("only a PROMPT engine"), std::string::npos) << normal.error().message;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PrefillKvStream, ::testing::Values("llama", "gemma3", "gpt_oss", "deepseek_v2"));

}  // namespace
}  // namespace deepinfer::testing
