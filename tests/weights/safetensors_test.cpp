// Safetensors reading and writing: round trips, the byte layout the format specifies, and a
// clear error (never a crash) for every kind of malformed or truncated file.
#include "weights/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "test_files.h"

namespace deepinfer {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::safetensors_bytes;
using testing::TempDir;
using testing::write_file;

template <typename T>
TensorView view_of(const std::string& name, DType dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
  TensorView view;
  view.name = name;
  view.dtype = dtype;
  view.shape = std::move(shape);
  view.data = values.data();
  view.size_bytes = values.size() * sizeof(T);
  return view;
}

template <typename T>
std::vector<T> values_of(const TensorView& view) {
  std::vector<T> values(view.size_bytes / sizeof(T));
  std::memcpy(values.data(), view.data, view.size_bytes);
  return values;
}

TEST(SafetensorsTest, RoundTripsEveryDtype) {
  TempDir dir;
  const std::vector<float> f32 = {1.5f, -2.25f, 3.0e-8f, 65504.0f, -0.0f, 7.0f};
  std::vector<uint16_t> bf16;
  std::vector<uint16_t> f16;
  for (float v : {0.5f, -1.0f, 3.140625f, 1024.0f}) {
    bf16.push_back(f32_to_bf16(v));
    f16.push_back(f32_to_f16(v));
  }
  const std::vector<int32_t> i32 = {-7, 0, 2147483647};
  const std::vector<int64_t> i64 = {-9000000000LL, 42};
  const std::vector<float> scalar = {9.0f};
  const std::vector<float> empty;
  const std::string path = dir.file("model.safetensors");
  ASSERT_TRUE(
      write_safetensors(path,
                        {view_of("w.f32", DType::kF32, {2, 3}, f32), view_of("w.bf16", DType::kBF16, {4}, bf16),
                         view_of("w.f16", DType::kF16, {2, 2}, f16), view_of("ids.i32", DType::kI32, {3}, i32),
                         view_of("ids.i64", DType::kI64, {1, 2}, i64), view_of("scalar", DType::kF32, {}, scalar),
                         view_of("empty", DType::kF32, {0, 5}, empty)},
                        {{"format", "pt"}})
          .ok());

  Result<WeightStore> store = WeightStore::open_file(path);
  ASSERT_TRUE(store.ok()) << store.error().message;
  EXPECT_EQ(store->names(),
            (std::vector<std::string>{"empty", "ids.i32", "ids.i64", "scalar", "w.bf16", "w.f16", "w.f32"}));
  EXPECT_EQ(store->metadata().at("format"), "pt");
  EXPECT_EQ(store->source(), path);
  EXPECT_EQ(store->total_bytes(), 24u + 8u + 8u + 12u + 16u + 4u + 0u);

  const TensorView w = store->get("w.f32", {2, 3}).value();
  EXPECT_EQ(w.dtype, DType::kF32);
  EXPECT_EQ(w.file, path);
  EXPECT_EQ(w.numel(), 6);
  EXPECT_EQ(values_of<float>(w), f32);
  EXPECT_EQ(values_of<uint16_t>(store->get("w.bf16", {4}).value()), bf16);
  EXPECT_EQ(values_of<uint16_t>(store->get("w.f16", {2, 2}).value()), f16);
  EXPECT_EQ(values_of<int32_t>(store->get("ids.i32", {3}).value()), i32);
  EXPECT_EQ(values_of<int64_t>(store->get("ids.i64", {1, 2}).value()), i64);
  const TensorView s = store->get("scalar", {}).value();
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(values_of<float>(s), scalar);
  EXPECT_EQ(store->get("empty", {0, 5}).value().size_bytes, 0u);

  std::vector<float> converted(4);
  convert_to_f32(store->get("w.bf16", {4}).value().data, DType::kBF16, 4, converted.data());
  EXPECT_EQ(converted, (std::vector<float>{0.5f, -1.0f, 3.140625f, 1024.0f}));
}

// The layout the format specifies: u64 LE header length, JSON header padded with spaces to a
// multiple of 8, then each tensor's bytes, back to back, at its data_offsets (name order).
TEST(SafetensorsTest, WritesTheSpecifiedLayout) {
  TempDir dir;
  const std::vector<float> b = {1.0f, 2.0f};
  const std::vector<uint16_t> a = {0x3f80, 0x4000, 0x4040};
  const std::string path = dir.file("x.safetensors");
  ASSERT_TRUE(write_safetensors(path, {view_of("b", DType::kF32, {2}, b), view_of("a", DType::kBF16, {3}, a)}).ok());
  const std::string bytes = testing::read_file(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t header_bytes = 0;
  for (int i = 0; i < 8; ++i) header_bytes |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  EXPECT_EQ((8 + header_bytes) % 8, 0u);
  ASSERT_EQ(bytes.size(), 8 + header_bytes + 6 + 8);
  std::string header_text = bytes.substr(8, header_bytes);
  const size_t json_end = header_text.find_last_not_of(' ') + 1;
  EXPECT_EQ(header_text.substr(json_end), std::string(header_bytes - json_end, ' '));
  const nlohmann::json header = nlohmann::json::parse(header_text);
  EXPECT_EQ(header, nlohmann::json::parse(R"({"a": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]},
                                              "b": {"dtype": "F32", "shape": [2], "data_offsets": [6, 14]}})"));
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + header_bytes, a.data(), 6), 0);
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + header_bytes + 6, b.data(), 8), 0);
}

// A header as the reference Python writer lays it out (__metadata__ first, entries in offset
// order, keys dtype/shape/data_offsets), read without our writer involved.
TEST(SafetensorsTest, ReadsAHandWrittenFile) {
  TempDir dir;
  const std::string path = dir.file("hand.safetensors");
  std::string data(12, '\0');
  const float one = 1.0f;
  std::memcpy(&data[8], &one, 4);
  data[0] = '\x80';
  data[1] = '\x3f';  // bf16 1.0
  write_file(path, safetensors_bytes(R"({"__metadata__":{"format":"pt"},)"
                                     R"("z":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},)"
                                     R"("a":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}    )",
                                     data));
  Result<WeightStore> store = WeightStore::open_file(path);
  ASSERT_TRUE(store.ok()) << store.error().message;
  EXPECT_EQ(values_of<float>(store->get("a", {1}).value()), std::vector<float>{1.0f});
  const TensorView z = store->find("z").value();
  EXPECT_EQ(z.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(bf16_to_f32(values_of<uint16_t>(z)[0]), 1.0f);
  EXPECT_FALSE(store->find("missing").has_value());
}

TEST(SafetensorsTest, GetNamesTheTensorAndShapes) {
  TempDir dir;
  const std::vector<float> values(6, 0.0f);
  const std::string path = dir.file("m.safetensors");
  ASSERT_TRUE(
      write_safetensors(path, {view_of("model.layers.0.mlp.up_proj.weight", DType::kF32, {2, 3}, values)}).ok());
  const WeightStore store = WeightStore::open_file(path).value();
  Result<TensorView> wrong = store.get("model.layers.0.mlp.up_proj.weight", {3, 2});
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error().message,
            "model.layers.0.mlp.up_proj.weight in " + path + " has shape [2, 3], expected [3, 2]");
  Result<TensorView> missing = store.get("model.layers.0.mlp.down_proj.weight", {3, 2});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message, "model.layers.0.mlp.down_proj.weight is missing from " + path);
}

TEST(SafetensorsTest, PrefixesAreRenamedFirstMatchFirstAndCollisionsNamed) {
  TempDir dir;
  const std::vector<float> a = {1.0f, 2.0f}, b = {3.0f, 4.0f}, c = {5.0f, 6.0f};
  const std::string path = dir.file("m.safetensors");
  ASSERT_TRUE(write_safetensors(path, {view_of("language_model.model.norm.weight", DType::kF32, {2}, a),
                                       view_of("language_model.lm_head.weight", DType::kF32, {1, 2}, b),
                                       view_of("vision_tower.patch.weight", DType::kF32, {2}, c)})
                  .ok());
  const WeightStore store = WeightStore::open_file(path).value();
  const WeightStore text = store
                               .with_prefixes_renamed({{"language_model.model.", "model."},
                                                       {"language_model.", "unused."},
                                                       {"language_model.lm_head.", "lm_head."}})
                               .value();
  EXPECT_EQ(text.names(),
            (std::vector<std::string>{"model.norm.weight", "unused.lm_head.weight", "vision_tower.patch.weight"}));
  const TensorView norm = text.get("model.norm.weight", {2}).value();
  EXPECT_EQ(norm.name, "model.norm.weight");
  EXPECT_EQ(values_of<float>(norm), a);
  EXPECT_EQ(norm.data, store.find("language_model.model.norm.weight")->data) << "a view of the same mapping";
  EXPECT_EQ(text.get("model.embed_tokens.weight", {2}).error().message,
            "model.embed_tokens.weight is missing from " + path +
                " (language_model.model.* read as model.*, language_model.* read as unused.*)");
  auto collision = store.with_prefixes_renamed({{"language_model.model.norm.", "x."}, {"vision_tower.patch.", "x."}});
  ASSERT_FALSE(collision.ok());
  EXPECT_EQ(collision.error().message, path +
                                           ": tensors language_model.model.norm.weight and "
                                           "vision_tower.patch.weight would both be read as x.weight");
}

TEST(SafetensorsTest, WriterRejectsInconsistentTensors) {
  TempDir dir;
  const std::vector<float> values(4, 0.0f);
  const std::string path = dir.file("bad.safetensors");
  Result<void> size = write_safetensors(path, {view_of("w", DType::kF32, {5}, values)});
  ASSERT_FALSE(size.ok());
  EXPECT_THAT(size.error().message, AllOf(HasSubstr("'w'"), HasSubstr("16 bytes, expected 20")));
  Result<void> twice =
      write_safetensors(path, {view_of("w", DType::kF32, {4}, values), view_of("w", DType::kF32, {4}, values)});
  ASSERT_FALSE(twice.ok());
  EXPECT_THAT(twice.error().message, HasSubstr("twice"));
  Result<void> no_dir =
      write_safetensors(dir.file("no/such/dir.safetensors"), {view_of("w", DType::kF32, {4}, values)});
  ASSERT_FALSE(no_dir.ok());
  EXPECT_THAT(no_dir.error().message, HasSubstr("no/such/dir.safetensors"));
}

struct BadHeaderCase {
  const char* label;
  std::string header;
  std::string data;
  std::vector<std::string> expected;  // substrings of the error, besides the file's path
};

std::vector<BadHeaderCase> bad_header_cases() {
  const std::string eight(8, '\0');
  return {
      {"invalid JSON", R"({"w": {"dtype": "F32", )", eight, {"not valid JSON", "line 1, column"}},
      {"not an object", R"([1, 2])", "", {"must be a JSON object"}},
      {"entry not an object", R"({"w": 3})", "", {"'w'", "dtype, shape and data_offsets"}},
      {"fp8 e5m2 dtype",
       R"({"w": {"dtype": "F8_E5M2", "shape": [8], "data_offsets": [0, 8]}})",
       eight,
       {"'w'", "F8_E5M2", "supported dtypes: F32, BF16, F16, I32, I64, F8_E4M3"}},
      {"missing dtype", R"({"w": {"shape": [2], "data_offsets": [0, 8]}})", eight, {"'w'", "dtype"}},
      {"negative shape",
       R"({"w": {"dtype": "F32", "shape": [2, -1], "data_offsets": [0, 8]}})",
       eight,
       {"'w'", "negative dimension", "[2,-1]"}},
      {"float shape",
       R"({"w": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]}})",
       eight,
       {"'w'", "non-negative integers"}},
      {"missing shape", R"({"w": {"dtype": "F32", "data_offsets": [0, 8]}})", eight, {"'w'", "shape"}},
      {"reversed offsets",
       R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})",
       eight,
       {"'w'", "reversed data_offsets [8, 0]"}},
      {"offsets past the data",
       R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})",
       eight,
       {"'w'", "past the end of the data (8 bytes)", "truncated"}},
      {"size mismatch",
       R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})",
       eight,
       {"'w'", "needs 12 bytes", "span 8"}},
      {"one offset", R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8]}})", eight, {"'w'", "data_offsets"}},
      {"negative offset",
       R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]}})",
       eight,
       {"'w'", "data_offsets"}},
      {"overflowing shape",
       R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 8]}})",
       eight,
       {"'w'", "too large"}},
      // No elements, but 2^62 * 2 overflows the int64 product TensorView::numel() computes.
      {"zero-size shape whose partial product overflows",
       R"({"w": {"dtype": "F32", "shape": [4611686018427387904, 2, 0], "data_offsets": [0, 0]}})",
       "",
       {"'w'", "too large"}},
      {"overlap",
       R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
           "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
       std::string(12, '\0'),
       {"'a'", "'b'", "overlap"}},
      {"metadata not strings", R"({"__metadata__": {"format": 1}})", "", {"__metadata__", "'format'"}},
  };
}

TEST(SafetensorsTest, RejectsEveryMalformedHeaderWithItsName) {
  TempDir dir;
  for (const BadHeaderCase& c : bad_header_cases()) {
    SCOPED_TRACE(c.label);
    const std::string path = dir.file("bad.safetensors");
    write_file(path, safetensors_bytes(c.header, c.data));
    Result<WeightStore> store = WeightStore::open_file(path);
    ASSERT_FALSE(store.ok());
    EXPECT_THAT(store.error().message, HasSubstr(path));
    for (const std::string& part : c.expected) EXPECT_THAT(store.error().message, HasSubstr(part));
  }
}

TEST(SafetensorsTest, RejectsBadLengthPrefixes) {
  TempDir dir;
  const std::string path = dir.file("short.safetensors");
  write_file(path, std::string(5, '\0'));
  Result<WeightStore> tiny = WeightStore::open_file(path);
  ASSERT_FALSE(tiny.ok());
  EXPECT_THAT(tiny.error().message, AllOf(HasSubstr(path), HasSubstr("truncated"), HasSubstr("5 bytes")));

  write_file(path, testing::length_prefix(1234) + std::string(91, ' '));
  Result<WeightStore> cut = WeightStore::open_file(path);
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.error().message, path + " is truncated: header says 1234 bytes, file has 99");

  write_file(path, std::string("GGUF\x03\0\0\0", 8) + std::string(64, '\0'));  // another format's magic
  Result<WeightStore> other = WeightStore::open_file(path);
  ASSERT_FALSE(other.ok());
  EXPECT_THAT(other.error().message, AllOf(HasSubstr(path), HasSubstr("not a safetensors file")));

  Result<WeightStore> absent = WeightStore::open_file(dir.file("absent.safetensors"));
  ASSERT_FALSE(absent.ok());
  EXPECT_THAT(absent.error().message, HasSubstr("absent.safetensors"));
}

// Cuts a valid file at every length short of complete: in the length prefix, in the header
// and in the data. Each must give an error that names the file, and never read past the end.
TEST(SafetensorsTest, EveryTruncationIsAnError) {
  TempDir dir;
  const std::vector<float> a = {1.0f, 2.0f, 3.0f};
  const std::vector<uint16_t> b = {1, 2, 3, 4, 5};
  const std::string full_path = dir.file("full.safetensors");
  ASSERT_TRUE(
      write_safetensors(full_path, {view_of("a", DType::kF32, {3}, a), view_of("b", DType::kBF16, {5}, b)}).ok());
  const std::string bytes = testing::read_file(full_path);
  ASSERT_TRUE(WeightStore::open_file(full_path).ok());

  const std::string path = dir.file("cut.safetensors");
  for (size_t length = 0; length < bytes.size(); ++length) {
    SCOPED_TRACE("cut at " + std::to_string(length) + " of " + std::to_string(bytes.size()));
    write_file(path, bytes.substr(0, length));
    Result<WeightStore> store = WeightStore::open_file(path);
    ASSERT_FALSE(store.ok());
    EXPECT_THAT(store.error().message, AllOf(HasSubstr(path), HasSubstr("truncated")));
  }
}

TEST(SafetensorsTest, ShapeToString) {
  EXPECT_EQ(shape_to_string({}), "[]");
  EXPECT_EQ(shape_to_string({7}), "[7]");
  EXPECT_EQ(shape_to_string({2, 3, 4}), "[2, 3, 4]");
}

}  // namespace
}  // namespace deepinfer
