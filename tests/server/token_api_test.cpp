// The token-level API's wire format: every SamplingParams field, every RequestOutput field and
// the event's error survive the round trip bit for bit (logprobs included); bad input is an error
// naming the field.
#include "server/token_api.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "server/encode_api.h"

namespace deepinfer::server {
namespace {

TEST(TokenApi, SamplingParamsRoundTripEveryField) {
  SamplingParams p;
  p.n = 3;
  p.temperature = 0.7;
  p.top_p = 0.91;
  p.top_k = 17;
  p.min_p = 0.05;
  p.seed = 18446744073709551615ull;
  p.presence_penalty = 0.5;
  p.frequency_penalty = -0.25;
  p.repetition_penalty = 1.1;
  p.logit_bias = {{5, -100.0f}, {9, 0.1f}};
  p.stop = {"\n\n", "END"};
  p.stop_token_ids = {2, 3};
  p.include_stop_str_in_output = true;
  p.ignore_eos = true;
  p.max_tokens = 77;
  p.min_tokens = 4;
  p.logprobs = 5;
  p.prompt_logprobs = 2;
  p.skip_special_tokens = false;
  p.structured_output = StructuredOutputParams{StructuredOutputParams::Kind::kChoice, "", {"yes", "no"}, false, 2};
  Submission submission{{1, 2, 3}, p, 4, "tenant", nullptr, TrafficClass::kAgent};
  const std::string wire = submission_to_json(submission).dump();
  auto back = submission_from_json(nlohmann::json::parse(wire));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->prompt_token_ids, submission.prompt_token_ids);
  EXPECT_EQ(back->priority, 4);
  EXPECT_EQ(back->cache_salt, "tenant");
  EXPECT_EQ(back->kv_cache_class, TrafficClass::kAgent);
  // Serialising the parsed copy gives the same bytes: no field lost or changed.
  EXPECT_EQ(submission_to_json(*back).dump(), wire);
  EXPECT_EQ(*back->params.seed, *p.seed);
  EXPECT_EQ(back->params.logit_bias, p.logit_bias);
  EXPECT_EQ(back->params.structured_output->choices, p.structured_output->choices);
}

TEST(TokenApi, DisaggregatedFieldsRoundTrip) {
  Submission prefill;
  prefill.prompt_token_ids = {1, 2};
  prefill.kv_handoff = KvHandoff{KvTransferMode::kPush, "abc-7", "10.0.0.3", 9100};
  auto prefill_back = submission_from_json(submission_to_json(prefill));
  ASSERT_TRUE(prefill_back.ok()) << prefill_back.error().message;
  ASSERT_TRUE(prefill_back->kv_handoff.has_value());
  EXPECT_EQ(prefill_back->kv_handoff->mode, KvTransferMode::kPush);
  EXPECT_EQ(prefill_back->kv_handoff->transfer_id, "abc-7");
  EXPECT_EQ(prefill_back->kv_handoff->host, "10.0.0.3");
  EXPECT_EQ(prefill_back->kv_handoff->port, 9100);
  EXPECT_FALSE(prefill_back->continues.has_value());

  Submission decode;
  decode.prompt_token_ids = {1, 2};
  decode.continues = PrefilledSource{KvTransferMode::kStore, "", 77};
  auto decode_back = submission_from_json(submission_to_json(decode));
  ASSERT_TRUE(decode_back.ok()) << decode_back.error().message;
  ASSERT_TRUE(decode_back->continues.has_value());
  EXPECT_EQ(decode_back->continues->mode, KvTransferMode::kStore);
  EXPECT_EQ(decode_back->continues->first_token, 77);
  EXPECT_FALSE(decode_back->continues->kv_lost);
  EXPECT_FALSE(decode_back->kv_handoff.has_value());
  decode.continues->kv_lost = true;
  auto recompute_back = submission_from_json(submission_to_json(decode));
  ASSERT_TRUE(recompute_back.ok()) << recompute_back.error().message;
  EXPECT_TRUE(recompute_back->continues->kv_lost);

  EngineEvent handed_over;
  handed_over.first_token_seed = 18446744073709551615ull;
  auto event_back = event_from_json(event_to_json(handed_over));
  ASSERT_TRUE(event_back.ok());
  EXPECT_EQ(event_back->first_token_seed, std::optional<uint64_t>(18446744073709551615ull));
  handed_over.error = Error{"the KV did not get there"};
  handed_over.error_status = 502;
  auto lost_back = event_from_json(event_to_json(handed_over));
  ASSERT_TRUE(lost_back.ok());
  EXPECT_EQ(lost_back->first_token_seed, std::optional<uint64_t>(18446744073709551615ull));
  EXPECT_EQ(lost_back->error_status, 502);

  nlohmann::json bad_mode = submission_to_json(decode);
  bad_mode["prefilled"]["mode"] = "carrier-pigeon";
  auto refused = submission_from_json(bad_mode);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("push or store, got 'carrier-pigeon'"), std::string::npos)
      << refused.error().message;
}

// An image encoder's rows travel as little-endian float32 bits (NaN, -0 and denormals included),
// beside the file of an image sent as one; the hash and grid with them.
TEST(TokenApi, EncodedImagesRoundTripBitForBit) {
  Submission submission;
  submission.prompt_token_ids = {1, 7, 7, 7, 2};
  ImageInput encoded;
  encoded.first_token = 1;
  encoded.grid = ImageGrid{1, 2, 6};
  encoded.rows = {1.5f,    -0.0f, std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::quiet_NaN(),
                  3.4e38f, -7.25f};
  encoded.hash = sha256(std::vector<uint8_t>{1, 2, 3});
  ImageInput file;
  file.first_token = 3;
  file.file = {0x89, 'P', 'N', 'G'};
  submission.images = {encoded, file};
  auto back = submission_from_json(nlohmann::json::parse(submission_to_json(submission).dump()));
  ASSERT_TRUE(back.ok()) << back.error().message;
  ASSERT_EQ(back->images.size(), 2u);
  const ImageInput& got = back->images[0];
  EXPECT_EQ(got.first_token, 1);
  EXPECT_EQ(got.grid.rows, 2);
  EXPECT_EQ(got.grid.columns, 6);
  EXPECT_EQ(got.hash, encoded.hash);
  ASSERT_EQ(got.rows.size(), encoded.rows.size());
  EXPECT_EQ(std::memcmp(got.rows.data(), encoded.rows.data(), encoded.rows.size() * sizeof(float)), 0);
  EXPECT_TRUE(got.file.empty());
  EXPECT_EQ(back->images[1].first_token, 3);
  EXPECT_EQ(back->images[1].file, file.file);
  EXPECT_TRUE(back->images[1].rows.empty());
  EXPECT_EQ(encoded_image_to_json(encoded)["dtype"], "f32");
  // Rows a bf16 checkpoint's encoder made (every value a bf16) travel as bf16, the same bits back.
  ImageInput rounded = encoded;
  rounded.rows = {1.5f, -0.0f, -7.25f, 65536.0f, std::numeric_limits<float>::infinity(), 0.0078125f};
  const nlohmann::json half = encoded_image_to_json(rounded);
  EXPECT_EQ(half["dtype"], "bf16");
  EXPECT_EQ(half["rows"].get<std::string>().size(), 16u);  // 12 bytes in base64
  auto rounded_back = encoded_image_from_json(half);
  ASSERT_TRUE(rounded_back.ok()) << rounded_back.error().message;
  EXPECT_EQ(std::memcmp(rounded_back->rows.data(), rounded.rows.data(), rounded.rows.size() * sizeof(float)), 0);
  // What an encoder answers, in order; another count than asked for is an error.
  const nlohmann::json answer{{"images", {encoded_image_to_json(encoded)}}};
  auto images = encode_response_from_json(answer, 1);
  ASSERT_TRUE(images.ok()) << images.error().message;
  EXPECT_EQ((*images)[0].hash, encoded.hash);
  EXPECT_FALSE(encode_response_from_json(answer, 2).ok());
  for (const auto& [field, value, says] :
       {std::tuple{"hash", nlohmann::json("abc"), "hash must be 64 lowercase hex digits"},
        std::tuple{"hash", nlohmann::json(std::string(64, 'G')), "hash must be 64 lowercase hex digits"},
        std::tuple{"rows", nlohmann::json("AAA="), "rows must be a whole number of f32 values"},
        std::tuple{"rows", nlohmann::json("@@@@"), "rows: "},
        std::tuple{"grid", nlohmann::json::array({1, 2}), "grid must be [frames, rows, columns]"}}) {
    nlohmann::json bad = encoded_image_to_json(encoded);
    bad[field] = value;
    auto refused = encoded_image_from_json(bad);
    ASSERT_FALSE(refused.ok()) << field;
    EXPECT_NE(refused.error().message.find(says), std::string::npos) << refused.error().message;
  }
}

TEST(TokenApi, EventsRoundTripBitForBit) {
  EngineEvent event;
  RequestOutput& out = event.output;
  out.request_id = 9;
  out.num_prompt_tokens = 12;
  out.num_cached_tokens = 8;
  out.finished = true;
  SampleOutput sample;
  sample.index = 1;
  sample.new_token_ids = {42, 43};
  sample.new_text = "h\xc3\xa9llo \"q\"\n";
  const double awkward = std::nextafter(-0.1, 0.0);
  sample.new_logprobs = {TokenLogprob{42, awkward, {{42, awkward}, {7, -2.5e-300}}}, TokenLogprob{43, -0.0, {}}};
  sample.finished = true;
  sample.finish_reason = FinishReason::kStop;
  sample.stop_reason = "END";
  sample.num_draft_tokens = 3;
  sample.num_accepted_draft_tokens = 2;
  out.samples = {sample};
  out.prompt_logprobs = std::vector<std::optional<TokenLogprob>>{std::nullopt, TokenLogprob{5, -1.25, {{5, -1.25}}}};
  const std::string wire = event_to_json(event).dump();
  auto back = event_from_json(nlohmann::json::parse(wire));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(event_to_json(*back).dump(), wire);
  EXPECT_EQ(back->output.samples[0].new_logprobs[0].logprob, awkward);
  EXPECT_EQ(back->output.samples[0].new_text, sample.new_text);
  EXPECT_FALSE(back->error.has_value());

  EngineEvent failed;
  failed.error = Error{"worker lost its device"};
  failed.error_status = 503;
  failed.output.error = Error{"grammar did not compile"};
  auto failed_back = event_from_json(event_to_json(failed));
  ASSERT_TRUE(failed_back.ok());
  EXPECT_EQ(failed_back->error->message, "worker lost its device");
  EXPECT_EQ(failed_back->error_status, 503);
  EXPECT_EQ(failed_back->output.error->message, "grammar did not compile");
}

TEST(TokenApi, BadInputIsAnErrorNamingTheField) {
  auto no_prompt = submission_from_json(nlohmann::json{{"sampling", nlohmann::json::object()}});
  ASSERT_FALSE(no_prompt.ok());
  EXPECT_NE(no_prompt.error().message.find("prompt_token_ids"), std::string::npos) << no_prompt.error().message;
  auto bad_type =
      submission_from_json(nlohmann::json{{"prompt_token_ids", {1}}, {"sampling", {{"temperature", "hot"}}}});
  ASSERT_FALSE(bad_type.ok());
  EXPECT_NE(bad_type.error().message.find("sampling"), std::string::npos) << bad_type.error().message;
  auto bad_reason = event_from_json(nlohmann::json{{"samples", {{{"index", 0}, {"finish_reason", 99}}}}});
  ASSERT_FALSE(bad_reason.ok());
  EXPECT_NE(bad_reason.error().message.find("finish_reason"), std::string::npos) << bad_reason.error().message;
}

}  // namespace
}  // namespace deepinfer::server
