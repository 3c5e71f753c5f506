// The engine's speculative decoding on the CPU: speculative_engine_cases.h, the budget, the
// PROMPT -> COMPLETION handover, and what it refuses.
#include <gtest/gtest.h>

#include "engine/batch_builder.h"
#include "model/decode_graphs.h"
#include "speculative_engine_cases.h"

namespace deepinfer {
namespace {

using testing::speculative_config;

TEST(SpeculativeEngine, OutputWithDraftsIsOutputWithoutThem) {
  testing::TestModel loaded = testing::load_test_model(testing::speculative_model_dir(), true);
  testing::expect_speculation_keeps_output(*loaded.model);
}

// The budget shrinks when verifying or drafting does not pay: with a verify curve on which any
// extra row costs more than a whole token's worth, no draft is verified; with a draft module as
// slow as ten steps and the acceptance known beforehand, nothing is drafted (without the prior the
// engine would first draft to measure it). The output stays the same.
TEST(SpeculativeEngine, BudgetShrinksWhenDraftsDoNotPay) {
  testing::TestModel loaded = testing::load_test_model(testing::speculative_model_dir(), true);
  auto tokenizer = Tokenizer::load(testing::speculative_model_dir());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error().message;
  const std::vector<testing::RequestSpec> requests = testing::speculative_requests(*tokenizer);
  const EngineConfig plain = testing::small_engine_config(256);
  const testing::SpeculativeRun want = testing::run_requests(*loaded.model, *tokenizer, plain, requests);

  EngineConfig costly_verify = plain;
  costly_verify.speculative = speculative_config(3, true);
  costly_verify.speculative.verify_curve = {{1, 1.0}, {2, 10.0}};
  const testing::SpeculativeRun no_verify = testing::run_requests(*loaded.model, *tokenizer, costly_verify, requests);
  testing::expect_same_text(no_verify.runs, want.runs, "costly verification");
  EXPECT_EQ(no_verify.stats.speculative->verify_steps, 0);

  EngineConfig costly_draft = plain;
  costly_draft.speculative = speculative_config(3, true);
  costly_draft.speculative.draft_curve = {{1, 10.0}, {4096, 10.0}};
  costly_draft.speculative.prior_proposed = {1000, 700, 500};  // no exploration: acceptance is known
  costly_draft.speculative.prior_accepted = {700, 500, 350};
  const testing::SpeculativeRun no_draft = testing::run_requests(*loaded.model, *tokenizer, costly_draft, requests);
  testing::expect_same_text(no_draft.runs, want.runs, "costly drafting");
  EXPECT_EQ(no_draft.stats.speculative->draft_calls, 0);
  EXPECT_GT(no_draft.stats.speculative->skipped_draft_steps, 0);
  EXPECT_EQ(no_draft.stats.num_overlapped_steps, 0);

  // In the pipelined loop the steps that draft nothing run ahead of each other, as without
  // speculation, with a synchronous step (where drafting is judged again) after every
  // Speculator::kPipelinedRun of them.
  EngineConfig pipelined = costly_draft;
  pipelined.async_scheduling = true;
  const testing::SpeculativeRun ahead = testing::run_requests(*loaded.model, *tokenizer, pipelined, requests);
  testing::expect_same_text(ahead.runs, want.runs, "costly drafting, pipelined");
  EXPECT_EQ(ahead.stats.speculative->draft_calls, 0);
  EXPECT_GT(ahead.stats.num_overlapped_steps, 0);
  EXPECT_GE(ahead.stats.speculative->skipped_draft_steps, ahead.stats.num_overlapped_steps);

  // Fixed K verifies every draft whatever the curves say.
  EngineConfig fixed = costly_verify;
  fixed.speculative.varlen = false;
  const testing::SpeculativeRun all = testing::run_requests(*loaded.model, *tokenizer, fixed, requests);
  testing::expect_same_text(all.runs, want.runs, "fixed K");
  EXPECT_GT(all.stats.speculative->verify_steps, 0);
}

// A COMPLETION engine drafts too (its draft module never saw the prompt, so drafts are worse, not
// wrong): the handed-over request continues as a NORMAL engine without drafts would.
TEST(SpeculativeEngine, CompletionEngineKeepsOutput) {
  testing::TestModel loaded = testing::load_test_model(testing::speculative_model_dir(), true);
  auto tokenizer = Tokenizer::load(testing::speculative_model_dir());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error().message;
  SamplingParams params;
  params.max_tokens = 32;
  params.ignore_eos = true;
  params.temperature = 0.0;
  const std::vector<int32_t> prompt = testing::encode(*tokenizer, "def fibonacci(n):\n    if n < 2:\n");
  const testing::SpeculativeRun want =
      testing::run_requests(*loaded.model, *tokenizer, testing::small_engine_config(64), {{prompt, params}});

  EngineConfig prompt_config = testing::small_engine_config(64);
  prompt_config.mode = EngineMode::kPrompt;
  prompt_config.speculative = speculative_config(2, true);
  PrefilledRequest prefilled;
  {
    EngineCore engine(*loaded.model, &*tokenizer, prompt_config);
    ASSERT_TRUE(engine.add_request(0, prompt, params).ok());
    testing::OutputCollector collector;
    testing::run_engine(engine, collector);
    std::vector<PrefilledRequest> handed = engine.take_prefilled();
    ASSERT_EQ(handed.size(), 1u);
    prefilled = std::move(handed.front());
  }
  EngineConfig completion = testing::small_engine_config(64);
  completion.mode = EngineMode::kCompletion;
  completion.speculative = speculative_config(2, true);
  EngineCore engine(*loaded.model, &*tokenizer, completion);
  ASSERT_TRUE(engine.add_prefilled_request(std::move(prefilled)).ok());
  testing::OutputCollector collector;
  testing::run_engine(engine, collector);
  EXPECT_EQ(collector.runs().at(0).samples.at(0).token_ids, want.runs.at(0).samples.at(0).token_ids);
  EXPECT_GT(engine.stats().speculative->verify_steps, 0);
}

// A verifying decode as one-token sequences (a model that writes KV before attending): each row a
// sequence over the same table ending at its own position, so the step is decode-shaped (a decode
// graph replays it); the logit rows stay the golden row and the drafts, in order.
TEST(SpeculativeEngine, VerifyRowsGoInAsOneTokenSequences) {
  KvCacheConfig kv_config;
  kv_config.num_blocks = 8;
  kv_config.block_size = 4;
  KvCacheManager kv(kv_config);
  Request decoding;
  decoding.seq_id = 1;
  decoding.set_prompt({5, 6, 7, 8, 9});
  decoding.drafts = {11, 12};
  Request prefilling;
  prefilling.seq_id = 2;
  prefilling.set_prompt({1, 2, 3});
  int32_t cached = 0;
  ASSERT_TRUE(kv.allocate(1, decoding.all_tokens(), 7, "", &cached));
  ASSERT_TRUE(kv.allocate(2, prefilling.all_tokens(), 3, "", &cached));
  decoding.num_computed_tokens = 4;
  SchedulerOutput scheduled;
  scheduled.scheduled = {{&decoding, 3, 2}};
  scheduled.num_batched_tokens = 3;
  for (bool split : {false, true}) {
    const BuiltBatch built = build_forward_batch(scheduled, kv, split);
    const ForwardBatch& batch = built.batch;
    EXPECT_EQ(batch.token_ids, (std::vector<int32_t>{9, 11, 12}));
    EXPECT_EQ(batch.positions, (std::vector<int32_t>{4, 5, 6}));
    EXPECT_EQ(batch.logit_rows, (std::vector<int32_t>{0, 1, 2}));
    ASSERT_EQ(built.rows.size(), 1u);
    EXPECT_EQ(built.rows[0].num_drafts, 2);
    EXPECT_TRUE(built.rows[0].samples);
    if (split) {
      EXPECT_EQ(batch.query_start, (std::vector<int32_t>{0, 1, 2, 3}));
      EXPECT_EQ(batch.seq_len, (std::vector<int32_t>{5, 6, 7}));
      EXPECT_EQ(batch.seq_ids, (std::vector<int64_t>{1, 1, 1}));
      EXPECT_TRUE(batch.rows_share_sequences);
      EXPECT_TRUE(DecodeGraphs::can_run(batch));
    } else {
      EXPECT_EQ(batch.query_start, (std::vector<int32_t>{0, 3}));
      EXPECT_EQ(batch.seq_len, (std::vector<int32_t>{7}));
      EXPECT_FALSE(batch.rows_share_sequences);
      EXPECT_FALSE(DecodeGraphs::can_run(batch));
    }
    EXPECT_EQ(batch.block_table.size(), batch.seq_len.size() * static_cast<size_t>(batch.max_blocks_per_seq));
  }
  // A prompt chunk beside it keeps its rows in one sequence.
  scheduled.scheduled.push_back({&prefilling, 3, 0});
  scheduled.num_batched_tokens = 6;
  const BuiltBatch mixed = build_forward_batch(scheduled, kv, true);
  EXPECT_EQ(mixed.batch.query_start, (std::vector<int32_t>{0, 1, 2, 3, 6}));
  EXPECT_EQ(mixed.batch.seq_len, (std::vector<int32_t>{5, 6, 7, 3}));
  EXPECT_TRUE(mixed.batch.rows_share_sequences);
  // A decode without drafts shares with no one.
  decoding.drafts.clear();
  scheduled.scheduled = {{&decoding, 1, 0}};
  scheduled.num_batched_tokens = 1;
  EXPECT_FALSE(build_forward_batch(scheduled, kv, true).batch.rows_share_sequences);
}

// Replayed drafts on models without a draft module: GQA layers (qwen3's with q/k norms in the front
// end, qwen3_moe's with experts), verify rows as one-token sequences on the CPU backend's separate
// front end.
TEST(SpeculativeEngine, ReplayedDraftsOnAModelWithoutADraftModule) {
  for (const char* fixture : {"llama", "qwen3", "qwen3_moe"}) {
    SCOPED_TRACE(fixture);
    testing::TestModel loaded = testing::load_test_model(fixture, true);
    EXPECT_EQ(testing::expect_replayed_drafts_keep_output(*loaded.model), 0);
  }
}

// Measured step times replace the profile's at their buckets and scale the rest by the mean ratio;
// a bucket's first time is left out.
TEST(SpeculativeEngine, MeasuredTimesCorrectTheProfile) {
  const std::vector<StepTimePoint> profile = {{1, 1.0}, {2, 1.0}, {4, 2.0}, {8, 4.0}};
  MeasuredTimes measured;
  EXPECT_EQ(measured.correct(profile)[2].seconds, 2.0);
  measured.observe(2, 100.0);  // a bucket's first time (a graph capture, perhaps) is not kept
  measured.observe(3, 100.0);
  EXPECT_EQ(measured.correct(profile)[1].seconds, 1.0);
  measured.observe(2, 3.0);  // 3x the profile
  measured.observe(3, 4.0);  // bucket 4: 2x
  const std::vector<StepTimePoint> corrected = measured.correct(profile);
  ASSERT_EQ(corrected.size(), 4u);
  EXPECT_DOUBLE_EQ(corrected[1].seconds, 3.0);
  EXPECT_DOUBLE_EQ(corrected[2].seconds, 4.0);
  EXPECT_DOUBLE_EQ(corrected[0].seconds, 2.5);  // the mean ratio, 2.5
  EXPECT_DOUBLE_EQ(corrected[3].seconds, 10.0);
  measured.observe(2, 13.0);  // one slow step (a capture of a new row count, perhaps) among fast ones
  measured.observe(2, 3.5);
  EXPECT_DOUBLE_EQ(measured.correct(profile)[1].seconds, 3.5);  // the median of the last five
  for (int i = 0; i < 5; ++i) measured.observe(2, 6.0);         // five steps of a new regime
  EXPECT_DOUBLE_EQ(measured.correct(profile)[1].seconds, 6.0);
  // Carried to a new engine, whose first step of each size captures its graphs again.
  MeasuredTimes carried = measured;
  carried.skip_next_first_times();
  carried.observe(2, 100.0);
  EXPECT_DOUBLE_EQ(carried.correct(profile)[1].seconds, 6.0);
  for (int i = 0; i < 3; ++i) carried.observe(2, 100.0);
  EXPECT_DOUBLE_EQ(carried.correct(profile)[1].seconds, 100.0);
  EXPECT_TRUE(MeasuredTimes().empty());
  EXPECT_FALSE(carried.empty());
}

TEST(SpeculativeEngine, RefusesWhatItCannotDo) {
  testing::TestModel draftless = testing::load_test_model("llama", false);
  EngineConfig config = testing::small_engine_config(64);
  config.speculative = speculative_config(2, true);
  try {
    EngineCore engine(*draftless.model, nullptr, config);
    ADD_FAILURE() << "a model without a draft module was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("no draft module"), std::string::npos) << e.what();
  }
  testing::TestModel loaded = testing::load_test_model(testing::speculative_model_dir(), true);
  config.deterministic = true;
  try {
    EngineCore engine(*loaded.model, nullptr, config);
    ADD_FAILURE() << "varlen was accepted in the deterministic mode";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--spec-varlen off"), std::string::npos) << e.what();
  }
  config.speculative.varlen = false;
  EXPECT_NO_THROW(EngineCore(*loaded.model, nullptr, config));
  config.speculative.num_tokens = 17;
  EXPECT_THROW(EngineCore(*loaded.model, nullptr, config), UserError);
}

}  // namespace
}  // namespace deepinfer
