// Images through the engine on the gemma3_vision fixture (a tiny Gemma3ForConditionalGeneration
// written by transformers, tools/reference/make_fixtures_multimodal.py): greedy decoding from a
// prompt holding the image gives transformers' tokens, whatever the step budget makes of the
// prefill's chunks (never one that ends inside the image) and with the pipelined loop; the prefix
// cache hits on the same image and misses on another; bad images are refused by name.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine_test_util.h"
#include "float_file.h"

namespace deepinfer::testing {
namespace {

constexpr int32_t kImageToken = 396;
constexpr int32_t kImageBegin = 7;  // the fixture's prompts hold the image at tokens 7..10

nlohmann::json expected_greedy(const std::string& fixture = "gemma3_vision") {
  return fixture_json(fixture, "expected.json")["greedy"];
}

// got equals transformers' greedy tokens up to and including the first near-tie (margin < 1e-3),
// after which the two may legitimately diverge.
void expect_transformers_tokens(const std::vector<int32_t>& got, const std::string& what,
                                const std::string& fixture = "gemma3_vision") {
  const nlohmann::json want = expected_greedy(fixture);
  const auto tokens = want["tokens"].get<std::vector<int32_t>>();
  const auto margins = want["margins"].get<std::vector<double>>();
  ASSERT_EQ(got.size(), tokens.size()) << what;
  for (size_t i = 0; i < tokens.size(); ++i) {
    ASSERT_EQ(got[i], tokens[i]) << what << " step " << i;
    if (margins[i] < 1e-3) break;
  }
}

std::vector<float> fixture_pixels() { return read_float_file(fixture_dir("gemma3_vision") + "/pixel_values.f32"); }

SamplingParams greedy(int32_t max_tokens) {
  SamplingParams params;
  params.temperature = 0.0;
  params.max_tokens = max_tokens;
  params.ignore_eos = true;
  return params;
}

// Runs one request with the image and returns its tokens and how many prompt tokens were cached.
std::pair<std::vector<int32_t>, int32_t> run_image_request(EngineCore& engine, int64_t id,
                                                           const std::vector<int32_t>& prompt,
                                                           std::vector<float> pixels, int32_t max_tokens,
                                                           ImageGrid grid = {}) {
  std::vector<ImageInput> images(1);
  images[0].first_token = kImageBegin;
  images[0].pixels = std::move(pixels);
  images[0].grid = grid;
  auto added = engine.add_request(id, prompt, greedy(max_tokens), 0, "", TrafficClass::kDefault,
                                  PrefillHandover::kCopyKv, nullptr, std::move(images));
  EXPECT_TRUE(added.ok()) << added.error().message;
  OutputCollector collector;
  run_engine(engine, collector);
  RequestRun& run = collector.runs()[id];
  return {run.samples[0].token_ids, run.num_cached_tokens};
}

// Two images in a 40-token prompt, at 10..19 and 25..29.
Request request_with_images(uint8_t first_hash_byte) {
  Request r;
  r.set_prompt(std::vector<int32_t>(40, 7));
  std::vector<PromptImage> images(2);
  images[0] = {10, 10, std::make_shared<EncodedImage>(), {}};
  images[1] = {25, 5, std::make_shared<EncodedImage>(), {}};
  images[0].hash.fill(first_hash_byte);
  images[1].hash.fill(9);
  r.set_images(std::move(images));
  return r;
}

TEST(EngineImages, ChunksNeverEndInsideABidirectionalImage) {
  const Request r = request_with_images(1);
  EXPECT_EQ(r.chunk_end(0, 8), 8);
  EXPECT_EQ(r.chunk_end(0, 10), 10);
  EXPECT_EQ(r.chunk_end(0, 15), 10) << "before an image that starts past the chunk's start";
  EXPECT_EQ(r.chunk_end(10, 12), 20) << "a chunk that starts at the image holds all of it";
  EXPECT_EQ(r.chunk_end(14, 16), 20) << "and so does one that starts inside it (after a cache hit)";
  EXPECT_EQ(r.chunk_end(20, 27), 25);
  EXPECT_EQ(r.chunk_end(25, 26), 30);
  EXPECT_EQ(r.chunk_end(30, 40), 40);
  // A causal image (Qwen2.5-VL's) may end a chunk anywhere.
  Request causal;
  causal.set_prompt(std::vector<int32_t>(40, 7));
  causal.set_images({PromptImage{10, 10, std::make_shared<EncodedImage>(), {}, false, 2, 5}});
  EXPECT_EQ(causal.chunk_end(0, 15), 15);
  EXPECT_EQ(causal.chunk_end(12, 14), 14);
}

// The same values cut into another grid are another image (a plain 448 x 224 image and a 224 x 448
// one give equal pixel arrays).
TEST(EngineImages, TheGridNamesTheImageToo) {
  ImageInput a;
  a.pixels = std::vector<float>(16, 0.5f);
  a.grid = {1, 2, 8};
  ImageInput b = a;
  b.grid = {1, 8, 2};
  EXPECT_NE(image_content_hash(a), image_content_hash(b));
  EXPECT_EQ(image_content_hash(a), image_content_hash(ImageInput(a)));
}

// The encoder cache keeps what fits its bytes (here two images of 3 pixel values and 1 row value),
// least recently sent first out.
TEST(EngineImages, TheEncoderCacheKeepsWithinItsBytes) {
  ImageInputFormat format;
  format.image_size = 1;
  format.tokens_per_image = 1;
  format.image_token_id = 5;
  PromptImageCache cache(32, 2 * 4 * sizeof(float));
  const auto take = [&](float value) {
    std::vector<ImageInput> images(1);
    images[0].first_token = 1;
    images[0].pixels = std::vector<float>(3, value);
    return cache.take({1, 5, 2}, std::move(images), format, 1).value()[0].image;
  };
  const auto first = take(1.0f);
  const auto second = take(2.0f);
  EXPECT_EQ(take(1.0f), first) << "kept: two fit";
  take(3.0f);
  EXPECT_EQ(take(1.0f), first) << "the most recently sent stays";
  EXPECT_NE(take(2.0f), second) << "the least recently sent went";
}

TEST(EngineImages, CacheTokensNameTheImage) {
  const Request a = request_with_images(1);
  const Request b = request_with_images(1);
  const Request c = request_with_images(2);
  const auto tokens = [](const Request& r) {
    return std::vector<int32_t>(r.cache_tokens().begin(), r.cache_tokens().end());
  };
  EXPECT_EQ(tokens(a), tokens(b));
  EXPECT_NE(tokens(a), tokens(c));
  for (int32_t t = 0; t < 40; ++t) {
    const bool in_image = (t >= 10 && t < 20) || (t >= 25 && t < 30);
    const int32_t id = a.cache_tokens()[static_cast<size_t>(t)];
    if (in_image) {
      EXPECT_LT(id, Request::kPendingToken) << t;
      EXPECT_EQ(id == c.cache_tokens()[static_cast<size_t>(t)], t >= 25) << t;
    } else {
      EXPECT_EQ(id, 7) << t;
    }
  }
  // Outputs join both views.
  Request d = request_with_images(1);
  d.append_output(11);
  EXPECT_EQ(d.cache_tokens().back(), 11);
  EXPECT_EQ(d.cache_tokens().size(), d.all_tokens().size());
  EXPECT_EQ(std::vector<int32_t>(d.all_tokens().begin(), d.all_tokens().begin() + 40), std::vector<int32_t>(40, 7));
}

TEST(EngineImages, GreedyMatchesTransformersAtEveryChunking) {
  TestModel loaded = load_test_model("gemma3_vision", false);
  const nlohmann::json want = expected_greedy();
  const auto prompt = want["prompt"].get<std::vector<int32_t>>();
  const auto num_tokens = static_cast<int32_t>(want["tokens"].size());
  // 2048: one chunk; 9: the first would end inside the image, so it ends before it; 5 and 4: the
  // image's chunk starts at it.
  for (int32_t budget : {2048, 9, 5, 4}) {
    for (bool async : {false, true}) {
      EngineConfig config = small_engine_config(16, 4, budget);
      config.async_scheduling = async;
      EngineCore engine(*loaded.model, nullptr, config);
      const auto got = run_image_request(engine, 0, prompt, fixture_pixels(), num_tokens).first;
      expect_transformers_tokens(got, "budget " + std::to_string(budget) + (async ? " async" : ""));
    }
  }
}

// Qwen2.5-VL and Qwen3-VL (the qwen2_5_vl and qwen3_vl fixtures, image at tokens 7..12 in a 4 x 6
// patch grid): the image's tokens causal, the text after it at M-RoPE's shifted positions, as
// transformers' get_rope_index places them (image.json), and greedy decoding as transformers' (Qwen3-VL:
// its DeepStack rows added after the first layers wherever a chunk holds image tokens).
void expect_qwen_vl_positions_and_greedy(const std::string& fixture) {
  const auto position_ids =
      fixture_json(fixture, "image.json")["position_ids"].get<std::vector<std::vector<int32_t>>>();
  const auto score = fixture_json(fixture, "expected.json")["score"]["tokens"].get<std::vector<int32_t>>();
  Request request;
  request.set_prompt(score);
  request.set_images({PromptImage{7, 6, std::make_shared<EncodedImage>(), {}, false, 2, 3}});
  for (int32_t p = 0; p < static_cast<int32_t>(score.size()); ++p) {
    if (p >= 7 && p < 13) continue;  // the image's own, from its grid (the greedy run below)
    EXPECT_EQ(request.rope_position(p), position_ids[0][static_cast<size_t>(p)]) << p;
  }

  TestModel loaded = load_test_model(fixture, false);
  const nlohmann::json want = expected_greedy(fixture);
  const auto prompt = want["prompt"].get<std::vector<int32_t>>();
  const auto num_tokens = static_cast<int32_t>(want["tokens"].size());
  const std::vector<float> pixels = read_float_file(fixture_dir(fixture) + "/pixel_values.f32");
  // 2048: one chunk; 7: the first ends before the image, which then runs whole; 9 and 4: chunks
  // that end inside the image (its tokens are causal, so they may).
  for (int32_t budget : {2048, 7, 9, 4}) {
    for (bool async : {false, true}) {
      EngineConfig config = small_engine_config(16, 4, budget);
      config.async_scheduling = async;
      EngineCore engine(*loaded.model, nullptr, config);
      const auto got = run_image_request(engine, 0, prompt, pixels, num_tokens, ImageGrid{1, 4, 6}).first;
      expect_transformers_tokens(got, "budget " + std::to_string(budget) + (async ? " async" : ""), fixture);
    }
  }
}

TEST(EngineImages, Qwen2VlPositionsAndGreedyMatchTransformers) { expect_qwen_vl_positions_and_greedy("qwen2_5_vl"); }

TEST(EngineImages, Qwen3VlPositionsAndGreedyMatchTransformers) { expect_qwen_vl_positions_and_greedy("qwen3_vl"); }

// The fixtures' two-image prompts (two_images.json: the 4 x 6 patch image, then image2.png at its
// own grid, 4 x 4): the text between and after the images at the positions transformers'
// get_rope_index gives, each image moving what follows it by its own merged grid's larger side.
// (With these grids a span of the columns alone would pass too; the image tokens' own positions are
// checked through their logprobs below.)
TEST(EngineImages, QwenVlTwoImagePositionsMatchTransformers) {
  for (const char* fixture : {"qwen2_5_vl", "qwen3_vl"}) {
    SCOPED_TRACE(fixture);
    const nlohmann::json two = fixture_json(fixture, "two_images.json");
    const auto first_grid = fixture_json(fixture, "image.json")["image_grid_thw"].get<std::vector<int32_t>>();
    const auto second_grid = two["second_image_grid_thw"].get<std::vector<int32_t>>();
    const auto position_ids = two["position_ids"].get<std::vector<std::vector<int32_t>>>();
    const auto tokens = two["score"]["tokens"].get<std::vector<int32_t>>();
    const auto spans = two["image_tokens"].get<std::vector<std::vector<int32_t>>>();
    ASSERT_EQ(spans.size(), 2u);
    // Merged 2 x 2: half the patch grid's rows and columns.
    const int32_t merged[2][2] = {{first_grid[1] / 2, first_grid[2] / 2}, {second_grid[1] / 2, second_grid[2] / 2}};
    std::vector<PromptImage> images;
    for (size_t i = 0; i < 2; ++i) {
      ASSERT_EQ(spans[i][1] - spans[i][0], merged[i][0] * merged[i][1]);
      PromptImage image;
      image.first_token = spans[i][0];
      image.num_tokens = spans[i][1] - spans[i][0];
      image.image = std::make_shared<EncodedImage>();
      image.bidirectional = false;
      image.mrope_rows = merged[i][0];
      image.mrope_columns = merged[i][1];
      images.push_back(image);
    }
    Request request;
    request.set_prompt(tokens);
    request.set_images(images);
    for (int32_t p = 0; p < static_cast<int32_t>(tokens.size()); ++p) {
      if ((p >= spans[0][0] && p < spans[0][1]) || (p >= spans[1][0] && p < spans[1][1])) continue;
      EXPECT_EQ(request.rope_position(p), position_ids[0][static_cast<size_t>(p)]) << p;
    }
  }
}

// The fixtures' two-image prompts through the engine, which encodes both images from their pixels
// and builds their tokens' positions (M-RoPE's three for Qwen) and lookahead (Gemma 3) itself: the
// prompt logprobs at every position are transformers' (two_images.json), in one chunk or in chunks
// of 9 tokens, synchronous and pipelined. (With the first image's pixels in both places the check
// fails.)
TEST(EngineImages, TwoImagePromptLogprobsMatchTransformers) {
  constexpr int32_t kTopK = 8;  // the fixtures' top-k lists
  for (const char* fixture : {"gemma3_vision", "qwen2_5_vl", "qwen3_vl"}) {
    SCOPED_TRACE(fixture);
    const nlohmann::json two = fixture_json(fixture, "two_images.json");
    const nlohmann::json info = fixture_json(fixture, "image.json");
    const auto prompt = two["score"]["tokens"].get<std::vector<int32_t>>();
    const nlohmann::json& positions = two["score"]["positions"];
    const auto spans = two["image_tokens"].get<std::vector<std::vector<int32_t>>>();
    ASSERT_EQ(spans.size(), 2u);
    const bool qwen = info.contains("image_grid_thw");
    const auto grid_of = [](const nlohmann::json& thw) {
      const auto v = thw.get<std::vector<int32_t>>();
      return ImageGrid{v[0], v[1], v[2]};
    };
    const ImageGrid grids[2] = {qwen ? grid_of(info["image_grid_thw"]) : ImageGrid{},
                                qwen ? grid_of(two["second_image_grid_thw"]) : ImageGrid{}};
    const char* pixel_files[2] = {"/pixel_values.f32", "/pixel_values2.f32"};
    TestModel loaded = load_test_model(fixture, false);
    for (int32_t budget : {2048, 9}) {
      for (bool async : {false, true}) {
        SCOPED_TRACE("budget " + std::to_string(budget) + (async ? " async" : ""));
        EngineConfig config = small_engine_config(16, 4, budget);
        config.async_scheduling = async;
        EngineCore engine(*loaded.model, nullptr, config);
        std::vector<ImageInput> images(2);
        for (size_t i = 0; i < 2; ++i) {
          images[i].first_token = spans[i][0];
          images[i].pixels = read_float_file(fixture_dir(fixture) + pixel_files[i]);
          images[i].grid = grids[i];
        }
        SamplingParams params = greedy(1);
        params.prompt_logprobs = kTopK;
        auto added = engine.add_request(0, prompt, params, 0, "", TrafficClass::kDefault, PrefillHandover::kCopyKv,
                                        nullptr, std::move(images));
        ASSERT_TRUE(added.ok()) << added.error().message;
        OutputCollector collector;
        run_engine(engine, collector);
        const auto& got = collector.runs()[0].prompt_logprobs;
        ASSERT_TRUE(got.has_value());
        ASSERT_EQ(got->size(), prompt.size());
        // Prompt token i is scored by position i - 1's logits, transformers' positions[i - 1].
        for (size_t i = 1; i < prompt.size(); ++i) {
          ASSERT_TRUE((*got)[i].has_value()) << i;
          const std::vector<std::pair<int32_t, double>>& top = (*got)[i]->top;
          const nlohmann::json& want = positions[i - 1]["top"];
          ASSERT_EQ(top.size(), want.size()) << i;
          for (size_t r = 0; r < want.size(); ++r) {
            // Ids may differ only by a swap among near-equal values; the logprobs agree at every rank.
            EXPECT_NEAR(top[r].second, want[r][1].get<double>(), 1e-4) << "position " << i - 1 << " rank " << r;
            if (r == 0 && top[0].first != want[0][0].get<int32_t>()) {
              EXPECT_NEAR(top[0].second, top[1].second, 1e-4) << "position " << i - 1 << ": another top-1";
            }
          }
        }
      }
    }
  }
}

// An image that comes encoded (an image encoder service's rows: ImageInput::rows, with the hash
// the service computed from its pixels) runs no encoder here and gives the same tokens, and the
// same prefix cache names as the pixels; rows of the wrong size are refused by name.
TEST(EngineImages, RowsEncodedElsewhereGiveTheSameTokens) {
  TestModel loaded = load_test_model("qwen2_5_vl", false);
  const nlohmann::json want = expected_greedy("qwen2_5_vl");
  const auto prompt = want["prompt"].get<std::vector<int32_t>>();
  const auto num_tokens = static_cast<int32_t>(want["tokens"].size());
  const ImageGrid grid{1, 4, 6};
  ImageInput image;
  image.first_token = kImageBegin;
  image.grid = grid;
  image.pixels = read_float_file(fixture_dir("qwen2_5_vl") + "/pixel_values.f32");
  image.hash = image_content_hash(image);
  image.rows.resize(static_cast<size_t>(6 * loaded.model->config().hidden_size));
  loaded.model->encode_image(image.pixels.data(), grid, image.rows.data());
  image.pixels.clear();
  for (bool async : {false, true}) {
    EngineConfig config = small_engine_config(16, 4, 9);
    config.async_scheduling = async;
    EngineCore engine(*loaded.model, nullptr, config);
    const auto run = [&](int64_t id, ImageInput input) {
      auto added = engine.add_request(id, prompt, greedy(num_tokens), 0, "", TrafficClass::kDefault,
                                      PrefillHandover::kCopyKv, nullptr, {std::move(input)});
      EXPECT_TRUE(added.ok()) << added.error().message;
      OutputCollector collector;
      run_engine(engine, collector);
      return collector.runs()[id];
    };
    expect_transformers_tokens(run(0, image).samples[0].token_ids, async ? "async" : "sync", "qwen2_5_vl");
    EXPECT_EQ(engine.stats().num_encoded_images, 0);
    // The same image as pixels hits the blocks the rows filled (one hash for both).
    ImageInput pixels = image;
    pixels.rows.clear();
    pixels.pixels = read_float_file(fixture_dir("qwen2_5_vl") + "/pixel_values.f32");
    pixels.hash.reset();
    const RequestRun again = run(1, pixels);
    EXPECT_EQ(again.num_cached_tokens, 12);  // the 14-token prompt's blocks but the last token's
    expect_transformers_tokens(again.samples.at(0).token_ids, "pixels after rows", "qwen2_5_vl");
  }
  EngineCore engine(*loaded.model, nullptr, small_engine_config(16, 4, 9));
  ImageInput short_rows = image;
  short_rows.rows.pop_back();
  auto refused = engine.add_request(0, prompt, greedy(2), 0, "", TrafficClass::kDefault, PrefillHandover::kCopyKv,
                                    nullptr, {short_rows});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("image 0 comes encoded with 383 values; this model takes 6 x 64"),
            std::string::npos)
      << refused.error().message;
}

// A prompt with an image split between a PROMPT engine and a COMPLETION engine: the prefill runs the
// image, the completion engine takes its KV with the image (named in its blocks, and placing the
// tokens after it at M-RoPE positions) and the tokens are transformers'; a NORMAL engine given the
// request without its KV computes the prompt, image included. Without the image the completion
// engine refuses the request, naming the placeholders.
TEST(EngineImages, ImagesCrossAPromptCompletionSplit) {
  TestModel prompt_model = load_test_model("qwen2_5_vl", false);
  TestModel completion_model = load_test_model("qwen2_5_vl", false);
  const nlohmann::json want = expected_greedy("qwen2_5_vl");
  const auto prompt = want["prompt"].get<std::vector<int32_t>>();
  const auto num_tokens = static_cast<int32_t>(want["tokens"].size());
  const auto image = [] {
    ImageInput input;
    input.first_token = kImageBegin;
    input.grid = ImageGrid{1, 4, 6};
    input.pixels = read_float_file(fixture_dir("qwen2_5_vl") + "/pixel_values.f32");
    return input;
  };
  EngineConfig prompt_config = small_engine_config(16, 4, 9);
  prompt_config.mode = EngineMode::kPrompt;
  EngineCore prompt_engine(*prompt_model.model, nullptr, prompt_config);
  ASSERT_TRUE(prompt_engine
                  .add_request(0, prompt, greedy(num_tokens), 0, "", TrafficClass::kDefault, PrefillHandover::kCopyKv,
                               nullptr, {image()})
                  .ok());
  OutputCollector prefill;
  run_engine(prompt_engine, prefill);
  std::vector<PrefilledRequest> prefilled = prompt_engine.take_prefilled();
  ASSERT_EQ(prefilled.size(), 1u);
  const int32_t first_token = prefilled[0].first_token;

  EngineConfig completion_config = small_engine_config(16, 4, 9);
  completion_config.mode = EngineMode::kCompletion;
  EngineCore completion_engine(*completion_model.model, nullptr, completion_config);
  auto refused = completion_engine.add_prefilled_request(prefilled[0]);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("the prompt holds 6 image placeholder tokens"), std::string::npos)
      << refused.error().message;
  PrefilledRequest recompute = prefilled[0];
  ASSERT_TRUE(
      completion_engine.add_prefilled_request(std::move(prefilled[0]), 0, "", TrafficClass::kDefault, {image()}).ok());
  OutputCollector completion;
  run_engine(completion_engine, completion);
  std::vector<int32_t> tokens = completion.runs()[0].samples[0].token_ids;
  ASSERT_FALSE(tokens.empty());
  EXPECT_EQ(tokens.front(), first_token);
  expect_transformers_tokens(tokens, "completion after the prefill", "qwen2_5_vl");
  EXPECT_EQ(completion_engine.stats().num_encoded_images, 0);  // the KV came: nothing to encode

  recompute.request_id = 1;
  recompute.kv.clear();
  recompute.swa_kv.clear();
  recompute.kv_not_carried = true;
  EngineCore normal_engine(*completion_model.model, nullptr, small_engine_config(16, 4, 9));
  ASSERT_TRUE(normal_engine.add_prefilled_request(std::move(recompute), 0, "", TrafficClass::kDefault, {image()}).ok());
  OutputCollector recomputed;
  run_engine(normal_engine, recomputed);
  expect_transformers_tokens(recomputed.runs()[1].samples[0].token_ids, "recomputed prompt", "qwen2_5_vl");
  EXPECT_EQ(normal_engine.stats().num_encoded_images, 1);
}

// Four requests at once over a cache too small for them all (preemptions recompute images whose
// encodings they keep), small steps, the pipelined loop, n = 2 (the second sample forked from the
// first's prompt) and a request with another image: every sample with the fixture's image gives
// transformers' tokens.
TEST(EngineImages, RequestsTogetherUnderPreemption) {
  TestModel loaded = load_test_model("gemma3_vision", false);
  const nlohmann::json want = expected_greedy();
  const auto prompt = want["prompt"].get<std::vector<int32_t>>();
  const auto num_tokens = static_cast<int32_t>(want["tokens"].size());
  EngineConfig config = small_engine_config(12, 4, 5);
  config.async_scheduling = true;
  EngineCore engine(*loaded.model, nullptr, config);
  for (int64_t id = 0; id < 4; ++id) {
    SamplingParams params = greedy(num_tokens);
    if (id == 3) params.n = 2;
    std::vector<ImageInput> images(1);
    images[0].first_token = kImageBegin;
    images[0].pixels = fixture_pixels();
    if (id == 2) {
      for (float& x : images[0].pixels) x = -x;
    }
    auto added = engine.add_request(id, prompt, params, 0, "", TrafficClass::kDefault, PrefillHandover::kCopyKv,
                                    nullptr, std::move(images));
    ASSERT_TRUE(added.ok()) << added.error().message;
  }
  OutputCollector collector;
  run_engine(engine, collector);
  EXPECT_GT(engine.stats().num_preemptions, 0);
  for (int64_t id : {0, 1, 3}) {
    for (const auto& [index, sample] : collector.runs()[id].samples) {
      expect_transformers_tokens(sample.token_ids, "request " + std::to_string(id) + " sample " + std::to_string(index));
    }
  }
  EXPECT_EQ(collector.runs()[3].samples.size(), 2u);
  EXPECT_EQ(collector.runs()[2].samples[0].token_ids.size(), static_cast<size_t>(num_tokens));
}

TEST(EngineImages, PrefixCacheHitsTheSameImageAndMissesAnother) {
  TestModel loaded = load_test_model("gemma3_vision", false);
  const auto prompt = expected_greedy()["prompt"].get<std::vector<int32_t>>();  // 12 tokens, image at 7..10
  EngineCore engine(*loaded.model, nullptr, small_engine_config(32, 4));
  const auto first = run_image_request(engine, 0, prompt, fixture_pixels(), 4);
  EXPECT_EQ(first.second, 0);
  // Blocks [0, 4) and [4, 8) (which holds the image's first token): the most a 12-token prompt
  // caches, the block with its last token always running.
  const auto same = run_image_request(engine, 1, prompt, fixture_pixels(), 4);
  EXPECT_EQ(same.second, 8);
  EXPECT_EQ(same.first, first.first);
  std::vector<float> other = fixture_pixels();
  for (float& x : other) x = -x;
  const auto different = run_image_request(engine, 2, prompt, std::move(other), 4);
  EXPECT_EQ(different.second, 4) << "only the block before the image is the same";
}

TEST(EngineImages, BadImagesAreRefusedByName) {
  TestModel loaded = load_test_model("gemma3_vision", false);
  const auto prompt = expected_greedy()["prompt"].get<std::vector<int32_t>>();
  EngineCore engine(*loaded.model, nullptr, small_engine_config(16, 4));
  const auto refusal = [&](int32_t first_token, std::vector<float> pixels, std::vector<int32_t> tokens) {
    std::vector<ImageInput> images;
    if (first_token >= 0) images.push_back({first_token, std::move(pixels)});
    auto added = engine.add_request(0, std::move(tokens), greedy(2), 0, "", TrafficClass::kDefault,
                                    PrefillHandover::kCopyKv, nullptr, std::move(images));
    return added.ok() ? std::string() : added.error().message;
  };
  EXPECT_EQ(refusal(6, fixture_pixels(), prompt),
            "image 0: prompt token 6 is 394, not the image placeholder 396 (this image takes 4 in a row)");
  EXPECT_EQ(refusal(kImageBegin, std::vector<float>(10), prompt),
            "image 0 has 10 pixel values; the encoder takes 9408 (3 x 56 x 56)");
  EXPECT_EQ(refusal(-1, {}, prompt), "the prompt holds 4 image placeholder tokens (396) but its 0 images take 0");
  EngineCore small_steps(*loaded.model, nullptr, small_engine_config(16, 4, 3));
  std::vector<ImageInput> one(1);
  one[0] = {kImageBegin, fixture_pixels()};
  auto too_big = small_steps.add_request(0, prompt, greedy(2), 0, "", TrafficClass::kDefault, PrefillHandover::kCopyKv,
                                         nullptr, std::move(one));
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.error().message,
            "an image takes 4 tokens, which must run in one step, but max_num_batched_tokens is 3");
  std::vector<int32_t> ends_in_image(prompt.begin(), prompt.begin() + 11);
  EXPECT_EQ(refusal(kImageBegin, fixture_pixels(), ends_in_image),
            "image 0 at prompt token 7 overlaps the image before it or does not end before the prompt's last token");
  EXPECT_FALSE(engine.has_unfinished_requests());

  TestModel text_only = load_test_model("gemma3", false);
  EngineCore text_engine(*text_only.model, nullptr, small_engine_config(16, 4));
  std::vector<ImageInput> images(1);
  images[0] = {kImageBegin, fixture_pixels()};
  auto added = text_engine.add_request(0, prompt, greedy(2), 0, "", TrafficClass::kDefault, PrefillHandover::kCopyKv,
                                       nullptr, std::move(images));
  ASSERT_FALSE(added.ok());
  EXPECT_EQ(added.error().message, "the model takes no images");
  EXPECT_EQ(std::count(prompt.begin(), prompt.end(), kImageToken), 4);
}

}  // namespace
}  // namespace deepinfer::testing
