// WeightStore::open_dir: finds a model directory's safetensors files (the shard index, one
// model.safetensors, or every *.safetensors), checks the index against the shards, and
// pre-faults the data.
#include <sys/mman.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "core/progress.h"
#include "weights/json_fields.h"
#include "weights/safetensors.h"
#include "weights/safetensors_parse.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleFileName = "model.safetensors";

std::string join_path(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

// The index's weight_map: tensor name -> shard file name.
Result<std::map<std::string, std::string>> read_index(const std::string& index_path) {
  Result<std::string> text = read_text_file(index_path);
  if (!text.ok()) return text.error();
  json index;
  try {
    index = json::parse(*text);
  } catch (const json::exception& e) {
    return Error{index_path + ": invalid JSON: " + e.what()};
  }
  const auto map_it = index.is_object() ? index.find("weight_map") : index.end();
  if (map_it == index.end() || !map_it->is_object()) {
    return Error{index_path + ": field 'weight_map' (tensor name -> shard file) is missing or not an object"};
  }
  if (map_it->empty()) return Error{index_path + ": weight_map lists no tensors"};
  std::map<std::string, std::string> weight_map;
  for (const auto& [name, shard] : map_it->items()) {
    if (!shard.is_string()) {
      return Error{index_path + ": weight_map entry '" + name + "' must be a shard file name, got " +
                   brief_json(shard)};
    }
    const std::string shard_name = shard.get<std::string>();
    const fs::path shard_path(shard_name);
    if (shard_name.empty() || shard_path.is_absolute() ||
        std::any_of(shard_path.begin(), shard_path.end(), [](const fs::path& part) { return part == ".."; })) {
      return Error{index_path + ": weight_map entry '" + name + "' names shard '" + shard_name +
                   "', which is not a file inside the model directory"};
    }
    weight_map.emplace(name, shard_name);
  }
  return weight_map;
}

Result<void> add_indexed_shards(const std::string& dir, const std::string& index_path, WeightStoreBuilder& builder) {
  Result<std::map<std::string, std::string>> weight_map = read_index(index_path);
  if (!weight_map.ok()) return weight_map.error();
  std::set<std::string> shards;
  for (const auto& entry : *weight_map) shards.insert(entry.second);
  for (const std::string& shard : shards) {
    std::error_code ec;
    if (!fs::is_regular_file(join_path(dir, shard), ec)) {
      return Error{index_path + " lists shard " + shard + ", which is missing from " + dir};
    }
  }
  for (const std::string& shard : shards) DI_TRY(builder.add_file(join_path(dir, shard)));
  for (const auto& [name, shard] : *weight_map) {
    const std::string shard_path = join_path(dir, shard);
    const std::optional<TensorView> tensor = builder.store().find(name);
    if (!tensor) {
      return Error{index_path + " lists tensor '" + name + "' in " + shard + ", but " + shard_path +
                   " has no tensor of that name"};
    }
    if (tensor->file != shard_path) {
      return Error{index_path + " lists tensor '" + name + "' in " + shard + ", but it is in " + tensor->file};
    }
  }
  return {};
}

Result<std::vector<std::string>> list_safetensors(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;  // a dangling link is skipped, not fatal
    if (it->path().extension() == ".safetensors" && it->is_regular_file(type_ec)) {
      names.push_back(it->path().filename().string());
    }
  }
  if (ec) return Error{"cannot list " + dir + ": " + ec.message()};
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

void WeightStoreBuilder::prefault(bool show_progress) {
  constexpr size_t kPageBytes = 4096;
  constexpr size_t kChunkBytes = size_t{64} << 20;  // progress granularity
  uint64_t total_bytes = 0;
  for (const auto& file : store_.files_) total_bytes += file->size_bytes();
  std::optional<ProgressBar> bar;
  if (show_progress) bar.emplace("loading weights", total_bytes, "B");
  uint8_t checksum = 0;
  for (const auto& file : store_.files_) {
    const size_t size = file->size_bytes();
    if (size == 0) continue;
    // Only a hint (read-ahead in the background while we touch pages); failure costs speed only.
    ::madvise(const_cast<uint8_t*>(file->data()), size, MADV_WILLNEED);
    // Volatile reads so the compiler cannot drop the touches.
    const volatile uint8_t* bytes = file->data();
    for (size_t chunk_start = 0; chunk_start < size; chunk_start += kChunkBytes) {
      const size_t chunk_end = std::min(size, chunk_start + kChunkBytes);
      for (size_t offset = chunk_start; offset < chunk_end; offset += kPageBytes) checksum ^= bytes[offset];
      if (bar) bar->advance(chunk_end - chunk_start);
    }
  }
  [[maybe_unused]] volatile uint8_t sink = checksum;
  if (bar) bar->finish();
}

Result<WeightStore> WeightStore::open_dir(const std::string& dir, bool show_progress) {
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  if (!fs::status_known(status)) return Error{"cannot access model directory " + dir + ": " + ec.message()};
  if (!fs::exists(status)) return Error{"model directory " + dir + " does not exist"};
  if (!fs::is_directory(status)) return Error{dir + " is not a directory; expected a model directory"};

  WeightStoreBuilder builder(dir);
  const std::string index_path = join_path(dir, kIndexName);
  const std::string single_path = join_path(dir, kSingleFileName);
  if (fs::exists(index_path, ec)) {
    DI_TRY(add_indexed_shards(dir, index_path, builder));
  } else if (fs::exists(single_path, ec)) {
    DI_TRY(builder.add_file(single_path));
  } else {
    Result<std::vector<std::string>> names = list_safetensors(dir);
    if (!names.ok()) return names.error();
    if (names->empty()) return Error{"no *.safetensors in " + dir};
    for (const std::string& name : *names) DI_TRY(builder.add_file(join_path(dir, name)));
  }
  builder.prefault(show_progress);
  return builder.finish();
}

}  // namespace deepinfer
