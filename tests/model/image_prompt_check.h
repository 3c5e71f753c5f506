// What the image-prompt checks of every image model share (gemma3_vision_check.h,
// qwen2_vl_check.h): a fixture's model, its prompts run with image rows in place of their
// placeholder tokens, and how far two runs' logits or rows differ.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fixtures.h"
#include "model/model.h"

namespace deepinfer::testing {

// Largest |got - want| over the largest |want|: the rows' scale, so one bound fits every stage.
inline double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0.0;
  double scale = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(got[i] - want[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
  }
  return diff / scale;
}

// An image's rows (what CausalLM::encode_image wrote) and the prompt positions [begin, end) of its
// placeholder tokens.
struct ImageRowsAt {
  std::vector<float> rows;
  int32_t begin = 0;
  int32_t end = 0;
};

// The logits of tokens run through lm in chunks [cuts[c], cuts[c + 1]) over one contiguous cache,
// each image's rows in place of its tokens' embeddings (num_sets > 1: rows holds that many sets of
// them, the others DeepStack's); extend adds what the model's images need to each chunk's batch
// (lookahead, M-RoPE positions).
inline std::vector<float> logits_with_images(
    CausalLM& lm, const std::vector<int32_t>& tokens, const std::vector<ImageRowsAt>& images,
    const std::vector<int32_t>& cuts,
    const std::function<void(ForwardBatch& batch, int32_t begin, int32_t end)>& extend, int32_t num_sets = 1) {
  constexpr int32_t kBlockSize = 16;
  const auto count = static_cast<int32_t>(tokens.size());
  const int32_t num_blocks = (count + kBlockSize - 1) / kBlockSize;
  const int64_t hidden = lm.config().hidden_size;
  const int64_t vocab = lm.config().vocab_size;
  lm.allocate_kv_cache({num_blocks, kBlockSize});
  std::vector<float> logits(static_cast<size_t>(count * vocab));
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    const std::vector<int32_t> chunk(tokens.begin() + cuts[c], tokens.begin() + cuts[c + 1]);
    ForwardBatch batch = contiguous_sequence_batch(chunk, cuts[c], num_blocks);
    for (const ImageRowsAt& image : images) {
      const int32_t first = std::max(image.begin, cuts[c]);
      const int32_t end = std::min(image.end, cuts[c + 1]);
      if (first >= end) continue;
      batch.embedding_rows.push_back({first - cuts[c], end - first, image.rows.data() + (first - image.begin) * hidden,
                                      nullptr, num_sets, (image.end - image.begin) * hidden});
    }
    extend(batch, cuts[c], cuts[c + 1]);
    lm.forward(batch, logits.data() + static_cast<size_t>(cuts[c]) * static_cast<size_t>(vocab));
  }
  return logits;
}

// The largest |a - b| of two logits runs: how far a change to the inputs moved them.
inline double largest_change(const std::vector<float>& a, const std::vector<float>& b) {
  double moved = 0.0;
  for (size_t i = 0; i < a.size(); ++i) moved = std::max(moved, static_cast<double>(std::fabs(a[i] - b[i])));
  return moved;
}

// The image spans of a fixture's two-image prompt (two_images.json's image_tokens).
inline std::vector<std::pair<int32_t, int32_t>> two_image_spans(const nlohmann::json& two) {
  std::vector<std::pair<int32_t, int32_t>> spans;
  for (const auto& span : two["image_tokens"]) spans.emplace_back(span[0].get<int32_t>(), span[1].get<int32_t>());
  return spans;
}

// The fixture's model through load_model on backend, which must take images (a fatal failure
// otherwise: wrap the call in ASSERT_NO_FATAL_FAILURE).
inline void load_image_model(Backend& backend, const std::string& fixture, std::unique_ptr<CausalLM>& lm) {
  auto model = load_model(fixture_dir(fixture), backend, false);
  ASSERT_TRUE(model.ok()) << model.error().message;
  ASSERT_NE((*model)->image_input(), nullptr);
  lm = std::move(*model);
}

}  // namespace deepinfer::testing
