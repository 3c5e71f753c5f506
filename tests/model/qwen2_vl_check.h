// Qwen2.5-VL and Qwen3-VL against transformers on any backend (tests/model and tests/cuda):
// tests/data/qwen2_5_vl and tests/data/qwen3_vl (written by tools/reference/make_fixtures_multimodal.py:
// a 2-block windowed tower over a 56 x 84 image in 14-pixel patches; a 3-block tower with
// interpolated position embeddings and DeepStack over a 64 x 96 image in 16-pixel patches; both
// 4 x 6 patches merged 2 x 2 into 6 image tokens, M-RoPE sections [2, 3, 3], interleaved for Qwen3-VL)
// hold the processor's pixel values, the encoder's rows (image_features.f32; Qwen3-VL's DeepStack
// rows in deepstack_features.f32), the M-RoPE positions transformers' get_rope_index gives the score
// prompt (image.json) and its logprobs.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "fixtures.h"
#include "float_file.h"
#include "image_prompt_check.h"
#include "model/model.h"

namespace deepinfer::testing {

// An ImageGrid of the fixture's [t, h, w] (image.json's image_grid_thw, two_images.json's
// second_image_grid_thw).
inline ImageGrid qwen_vl_grid(const nlohmann::json& thw) {
  const auto values = thw.get<std::vector<int32_t>>();
  return {values[0], values[1], values[2]};
}

// Qwen-VL's logits of tokens holding images at the M-RoPE positions transformers' get_rope_index
// gave them (position_ids, [3][tokens]; empty: 1D positions), num_sets sets of rows per image (1:
// without DeepStack's).
inline std::vector<float> qwen_vl_logits(CausalLM& lm, const std::vector<int32_t>& tokens,
                                         const std::vector<ImageRowsAt>& images, const std::vector<int32_t>& cuts,
                                         const std::vector<std::vector<int32_t>>& position_ids, int32_t num_sets) {
  return logits_with_images(
      lm, tokens, images, cuts,
      [&](ForwardBatch& batch, int32_t begin, int32_t end) {
        if (position_ids.empty()) return;
        for (int32_t p = begin; p < end; ++p) {
          batch.positions[static_cast<size_t>(p - begin)] = position_ids[0][static_cast<size_t>(p)];
        }
        const bool holds_image = std::any_of(images.begin(), images.end(), [&](const ImageRowsAt& image) {
          return std::max(begin, image.begin) < std::min(end, image.end);
        });
        if (!holds_image) return;
        for (size_t section = 1; section < 3; ++section) {
          for (int32_t p = begin; p < end; ++p) {
            batch.mrope_positions.push_back(position_ids[section][static_cast<size_t>(p)]);
          }
        }
      },
      num_sets);
}

// The fixture through load_model on backend: encode_image's rows (and DeepStack's) within
// rows_bound of transformers'; the score prompt with those rows at its image tokens (7..12) and
// transformers' M-RoPE positions gives its logprobs, in one forward or in chunks cut before and
// after the image. With 1D positions, or (Qwen3-VL) without the DeepStack rows, the same rows give
// other logits (the check can fail).
inline void expect_qwen_vl_matches_transformers(Backend& backend, double rows_bound,
                                                const std::string& fixture = "qwen2_5_vl") {
  const std::string dir = fixture_dir(fixture);
  std::unique_ptr<CausalLM> model;
  ASSERT_NO_FATAL_FAILURE(load_image_model(backend, fixture, model));
  CausalLM& lm = *model;
  const ImageInputFormat* format = lm.image_input();
  EXPECT_EQ(format->preprocessor, ImageInputFormat::Preprocessor::kQwen2Vl);
  EXPECT_EQ(format->image_token_id, 396);
  EXPECT_EQ(format->begin_token_id, 394);
  EXPECT_EQ(format->end_token_id, 395);
  EXPECT_TRUE(format->mrope);
  EXPECT_FALSE(format->bidirectional);
  const nlohmann::json info = fixture_json(fixture, "image.json");
  const ImageGrid grid = qwen_vl_grid(info["image_grid_thw"]);
  ASSERT_EQ(format->tokens_for(grid), 6);
  const int64_t hidden = lm.config().hidden_size;
  const int64_t vocab = lm.config().vocab_size;
  const std::vector<float> pixels = read_float_file(dir + "/pixel_values.f32");
  ASSERT_EQ(static_cast<int64_t>(pixels.size()), format->pixel_count(grid));
  const int32_t num_sets = 1 + format->deepstack_layers;
  EXPECT_EQ(num_sets, fixture == "qwen3_vl" ? 3 : 1);
  std::vector<float> rows(static_cast<size_t>(format->encoded_values(grid, hidden)));
  lm.encode_image(pixels.data(), grid, rows.data());
  std::vector<float> want = read_float_file(dir + "/image_features.f32");
  if (num_sets > 1) {
    const std::vector<float> deepstack = read_float_file(dir + "/deepstack_features.f32");
    want.insert(want.end(), deepstack.begin(), deepstack.end());
  }
  const double rows_error = relative_error(rows, want);
  std::cout << backend.name() << ": image rows " << rows_error << " (largest error over largest value)\n";
  EXPECT_LT(rows_error, rows_bound) << "encode_image's rows";

  const nlohmann::json expected = load_expected(fixture);
  const auto tokens = expected["score"]["tokens"].get<std::vector<int32_t>>();
  const auto count = static_cast<int32_t>(tokens.size());
  const auto position_ids = info["position_ids"].get<std::vector<std::vector<int32_t>>>();
  const std::vector<ImageRowsAt> images = {{rows, 7, 13}};
  for (int32_t t = 7; t < 13; ++t) ASSERT_EQ(tokens[static_cast<size_t>(t)], 396);
  for (const std::vector<int32_t>& cuts : {std::vector<int32_t>{0, count}, std::vector<int32_t>{0, 7, 13, 20, count}}) {
    SCOPED_TRACE("chunks ending at " + std::to_string(cuts[1]));
    expect_matches_score(expected["score"], qwen_vl_logits(lm, tokens, images, cuts, position_ids, num_sets), vocab);
  }
  const std::vector<float> with = qwen_vl_logits(lm, tokens, images, {0, count}, position_ids, num_sets);
  EXPECT_GT(largest_change(with, qwen_vl_logits(lm, tokens, images, {0, count}, {}, num_sets)), 0.01)
      << "M-RoPE's positions moved no logit";
  if (num_sets > 1) {
    EXPECT_GT(largest_change(with, qwen_vl_logits(lm, tokens, images, {0, count}, position_ids, 1)), 0.01)
        << "the DeepStack rows moved no logit";
  }
}

// The fixture's two-image prompt (two_images.json: text, the fixture's image, text, image2.png at
// another size, text) through load_model on backend: each image encoded from its processor pixels
// at its own grid and placed at its tokens, with transformers' M-RoPE positions for the whole
// prompt (the text after each image shifted by it), gives every position's logprobs as
// transformers', in one forward or in chunks cut at each image; zeroing the second image's rows
// moves the logits (it is read).
inline void expect_qwen_vl_two_image_prompt_matches_transformers(Backend& backend, const std::string& fixture) {
  const std::string dir = fixture_dir(fixture);
  std::unique_ptr<CausalLM> model;
  ASSERT_NO_FATAL_FAILURE(load_image_model(backend, fixture, model));
  CausalLM& lm = *model;
  const ImageInputFormat* format = lm.image_input();
  const int64_t hidden = lm.config().hidden_size;
  const nlohmann::json two = fixture_json(fixture, "two_images.json");
  const auto tokens = two["score"]["tokens"].get<std::vector<int32_t>>();
  const auto count = static_cast<int32_t>(tokens.size());
  const auto spans = two_image_spans(two);
  ASSERT_EQ(spans.size(), 2u);
  const ImageGrid grids[2] = {qwen_vl_grid(fixture_json(fixture, "image.json")["image_grid_thw"]),
                              qwen_vl_grid(two["second_image_grid_thw"])};
  std::vector<ImageRowsAt> images;
  for (const char* pixel_file : {"pixel_values.f32", "pixel_values2.f32"}) {
    const ImageGrid& grid = grids[images.size()];
    const auto [begin, end] = spans[images.size()];
    ASSERT_EQ(end - begin, format->tokens_for(grid)) << pixel_file;
    for (int32_t t = begin; t < end; ++t) ASSERT_EQ(tokens[static_cast<size_t>(t)], 396);
    const std::vector<float> pixels = read_float_file(dir + "/" + pixel_file);
    ASSERT_EQ(static_cast<int64_t>(pixels.size()), format->pixel_count(grid)) << pixel_file;
    ImageRowsAt image{std::vector<float>(static_cast<size_t>(format->encoded_values(grid, hidden))), begin, end};
    lm.encode_image(pixels.data(), grid, image.rows.data());
    images.push_back(std::move(image));
  }
  const auto position_ids = two["position_ids"].get<std::vector<std::vector<int32_t>>>();
  const int32_t num_sets = 1 + format->deepstack_layers;
  for (const std::vector<int32_t>& cuts :
       {std::vector<int32_t>{0, count}, std::vector<int32_t>{0, spans[0].first, spans[1].first, count}}) {
    SCOPED_TRACE("chunks ending at " + std::to_string(cuts[1]));
    expect_matches_score(two["score"], qwen_vl_logits(lm, tokens, images, cuts, position_ids, num_sets),
                         lm.config().vocab_size);
  }
  std::vector<ImageRowsAt> second_zeroed = images;
  std::fill(second_zeroed[1].rows.begin(), second_zeroed[1].rows.end(), 0.0f);
  EXPECT_GT(largest_change(qwen_vl_logits(lm, tokens, images, {0, count}, position_ids, num_sets),
                           qwen_vl_logits(lm, tokens, second_zeroed, {0, count}, position_ids, num_sets)),
            0.01)
      << "the second image moved no logit";
}

}  // namespace deepinfer::testing
