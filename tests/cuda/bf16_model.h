// Writes a BF16 copy of a float32 fixture model (config and safetensors) to a temporary
// directory, so the GPU tests can compare the bf16 path with the float32 path on the same weights.
#pragma once

#include <filesystem>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"

namespace deepinfer::testing {

// Returns the new directory (under the system temp dir, named after the fixture).
inline std::string write_bf16_copy(const std::string& fixture_dir, const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path out = fs::temp_directory_path() / ("deepinfer_bf16_" + name);
  fs::create_directories(out);
  for (const char* file : {"config.json", "generation_config.json"}) {
    if (fs::exists(fs::path(fixture_dir) / file)) {
      fs::copy_file(fs::path(fixture_dir) / file, out / file, fs::copy_options::overwrite_existing);
    }
  }
  std::ifstream in(fs::path(fixture_dir) / "model.safetensors", std::ios::binary);
  uint64_t header_bytes = 0;
  in.read(reinterpret_cast<char*>(&header_bytes), 8);
  std::string header_text(header_bytes, '\0');
  in.read(header_text.data(), static_cast<std::streamsize>(header_bytes));
  const std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const nlohmann::json header = nlohmann::json::parse(header_text);

  nlohmann::json new_header = nlohmann::json::object();
  std::vector<char> new_data;
  for (const auto& [tensor, info] : header.items()) {
    if (tensor == "__metadata__") continue;
    const auto offsets = info["data_offsets"].get<std::vector<size_t>>();
    const char* src = data.data() + offsets[0];
    const size_t begin = new_data.size();
    // FP8 block scales stay float32, as their loader expects.
    const bool is_scale = tensor.size() > 10 && tensor.compare(tensor.size() - 10, 10, "_scale_inv") == 0;
    if (info["dtype"] == "F32" && !is_scale) {
      const size_t count = (offsets[1] - offsets[0]) / 4;
      for (size_t i = 0; i < count; ++i) {
        float value = 0.0f;
        std::memcpy(&value, src + i * 4, 4);
        const uint16_t bits = f32_to_bf16(value);
        new_data.push_back(static_cast<char>(bits & 0xff));
        new_data.push_back(static_cast<char>(bits >> 8));
      }
      new_header[tensor] = {{"dtype", "BF16"}, {"shape", info["shape"]}};
    } else {
      new_data.insert(new_data.end(), src, data.data() + offsets[1]);
      new_header[tensor] = {{"dtype", info["dtype"]}, {"shape", info["shape"]}};
    }
    new_header[tensor]["data_offsets"] = {begin, new_data.size()};
  }
  std::string text = new_header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream file(out / "model.safetensors", std::ios::binary | std::ios::trunc);
  const uint64_t size = text.size();
  file.write(reinterpret_cast<const char*>(&size), 8);
  file.write(text.data(), static_cast<std::streamsize>(text.size()));
  file.write(new_data.data(), static_cast<std::streamsize>(new_data.size()));
  return out.string();
}

}  // namespace deepinfer::testing
