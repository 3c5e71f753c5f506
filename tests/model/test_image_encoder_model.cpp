// load_image_encoder: a multimodal checkpoint's image encoder alone (serve --role encoder) gives
// transformers' image features, bit for bit what the whole model's encode_image gives.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fixtures.h"
#include "float_file.h"
#include "gemma3_vision_check.h"
#include "model/image_encoder_model.h"
#include "model/model.h"

namespace deepinfer {
namespace {

struct EncoderFixture {
  const char* name;
  ImageGrid grid;  // the fixture's image (Gemma 3 takes no grid)
};

class ImageEncoderModelTest : public ::testing::TestWithParam<EncoderFixture> {};

TEST_P(ImageEncoderModelTest, AloneGivesTransformersRowsAsTheWholeModelDoes) {
  const EncoderFixture& fixture = GetParam();
  const std::string dir = testing::fixture_dir(fixture.name);
  auto backend = make_backend("cpu");
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  auto alone = load_image_encoder(dir, **backend, false);
  ASSERT_TRUE(alone.ok()) << alone.error().message;
  auto whole = load_model(dir, **backend, false);
  ASSERT_TRUE(whole.ok()) << whole.error().message;
  EXPECT_EQ(alone->row_width(), (*whole)->config().hidden_size);
  const ImageInputFormat& format = alone->encoder->format();
  EXPECT_EQ(format.image_token_id, (*whole)->image_input()->image_token_id);
  const std::vector<float> pixels = testing::read_float_file(dir + "/pixel_values.f32");
  ASSERT_EQ(static_cast<int64_t>(pixels.size()), format.pixel_count(fixture.grid));
  const auto size = static_cast<size_t>(format.encoded_values(fixture.grid, alone->row_width()));
  std::vector<float> rows(size);
  std::vector<float> whole_rows(size);
  alone->encoder->encode(pixels.data(), fixture.grid, rows.data());
  (*whole)->encode_image(pixels.data(), fixture.grid, whole_rows.data());
  std::vector<float> want = testing::read_float_file(dir + "/image_features.f32");
  if (format.deepstack_layers > 0) {  // Qwen3-VL: its DeepStack rows follow the main ones
    const std::vector<float> deepstack = testing::read_float_file(dir + "/deepstack_features.f32");
    want.insert(want.end(), deepstack.begin(), deepstack.end());
  }
  EXPECT_LT(testing::relative_error(rows, want), 5e-6);
  EXPECT_EQ(rows, whole_rows);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ImageEncoderModelTest,
                         ::testing::Values(EncoderFixture{"qwen2_5_vl", {1, 4, 6}},
                                           EncoderFixture{"qwen3_vl", {1, 4, 6}}, EncoderFixture{"gemma3_vision", {}}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ImageEncoderModel, ATextModelHasNoneToServe) {
  auto backend = make_backend("cpu");
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  auto loaded = load_image_encoder(testing::fixture_dir("qwen3"), **backend, false);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.error().message.find("architecture 'Qwen3ForCausalLM' has no image encoder to serve"),
            std::string::npos)
      << loaded.error().message;
}

}  // namespace
}  // namespace deepinfer
