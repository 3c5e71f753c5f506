// Reads tests/data/image/: the files and the manifest written by tools/reference/make_image_fixtures.py.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "float_file.h"
#include "image/image.h"

namespace deepinfer::test {

inline std::string image_fixture_path(const std::string& name) {
  return std::string(DEEPINFER_TEST_DATA_DIR) + "/image/" + name;
}

inline std::vector<uint8_t> read_image_fixture(const std::string& name) {
  std::ifstream in(image_fixture_path(name), std::ios::binary);
  EXPECT_TRUE(in.good()) << image_fixture_path(name);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline std::vector<float> read_f32_fixture(const std::string& name) {
  return testing::read_float_file(image_fixture_path(name));
}

inline const nlohmann::json& image_manifest() {
  static const nlohmann::json manifest = [] {
    std::ifstream in(image_fixture_path("manifest.json"));
    return nlohmann::json::parse(in);
  }();
  return manifest;
}

// The fixture's file decoded by try_decode_image, which must succeed.
inline RgbImage decode_fixture(const std::string& name) {
  const std::vector<uint8_t> bytes = read_image_fixture(name);
  Result<RgbImage> image = try_decode_image(bytes);
  EXPECT_TRUE(image.ok()) << name << ": " << (image.ok() ? "" : image.error().message);
  return image.ok() ? std::move(image).value() : RgbImage{};
}

}  // namespace deepinfer::test
