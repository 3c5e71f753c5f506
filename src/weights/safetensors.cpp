// Safetensors files: header validation, tensor lookup and the writer. Format: an 8-byte
// little-endian header length, a JSON header {name: {dtype, shape, data_offsets}, __metadata__},
// then the data; offsets are relative to the end of the header.
#include "weights/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "weights/json_fields.h"
#include "weights/safetensors_parse.h"

namespace deepinfer {
namespace {

using nlohmann::json;

constexpr uint64_t kLengthBytes = 8;
// The safetensors format caps the header at 100 MB; a bigger length means "not safetensors".
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kSupportedDTypes = "F32, BF16, F16, I32, I64, F8_E4M3, U8";

// Only the safetensors spellings: find_dtype() also takes transformers names ("float32").
std::optional<DType> find_safetensors_dtype(const std::string& name) {
  if (name == "F32") return DType::kF32;
  if (name == "BF16") return DType::kBF16;
  if (name == "F16") return DType::kF16;
  if (name == "I32") return DType::kI32;
  if (name == "I64") return DType::kI64;
  if (name == "F8_E4M3") return DType::kF8E4M3;
  if (name == "U8") return DType::kU8;
  return std::nullopt;
}

std::optional<uint64_t> find_unsigned(const json& value) {
  if (!value.is_number_unsigned()) return std::nullopt;
  return value.get<uint64_t>();
}

// One header entry with its offsets, kept until the overlap check.
struct ParsedTensor {
  TensorView view;
  uint64_t begin = 0;
  uint64_t end = 0;
};

Result<ParsedTensor> parse_tensor_entry(const std::string& path, const std::string& name, const json& entry,
                                        const uint8_t* data_start, uint64_t data_bytes) {
  const std::string where = path + ": tensor '" + name + "'";
  if (!entry.is_object()) {
    return Error{where + " must be a JSON object with dtype, shape and data_offsets, got " + brief_json(entry)};
  }
  const auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end() || !dtype_it->is_string()) {
    return Error{where + " has no dtype string"};
  }
  const std::string dtype_text = dtype_it->get<std::string>();
  const std::optional<DType> dtype = find_safetensors_dtype(dtype_text);
  if (!dtype) {
    return Error{where + " has dtype " + dtype_text + ", which deepinfer does not load; supported dtypes: " +
                 kSupportedDTypes + " (convert the checkpoint, e.g. to BF16)"};
  }

  ParsedTensor parsed;
  parsed.view.name = name;
  parsed.view.dtype = *dtype;
  parsed.view.file = path;
  const auto shape_it = entry.find("shape");
  if (shape_it == entry.end() || !shape_it->is_array()) {
    return Error{where + " has no shape array"};
  }
  // Signed and in shape order, as TensorView::numel() multiplies: every partial product must fit in
  // int64, even when a later dimension is 0.
  int64_t numel = 1;
  bool overflow = false;
  for (const json& dim : *shape_it) {
    if (dim.is_number_integer() && !dim.is_number_unsigned()) {
      return Error{where + " has a negative dimension in shape " + brief_json(*shape_it)};
    }
    const std::optional<uint64_t> size = find_unsigned(dim);
    if (!size || *size > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Error{where + ": shape must be a list of non-negative integers, got " + brief_json(*shape_it)};
    }
    parsed.view.shape.push_back(static_cast<int64_t>(*size));
    overflow = overflow || __builtin_mul_overflow(numel, static_cast<int64_t>(*size), &numel);
  }
  uint64_t expected_bytes = 0;
  overflow = overflow || __builtin_mul_overflow(numel, dtype_size_bytes(*dtype), &expected_bytes);
  if (overflow) return Error{where + " has shape " + brief_json(*shape_it) + ", too large to address"};

  const auto offsets_it = entry.find("data_offsets");
  std::optional<uint64_t> begin;
  std::optional<uint64_t> end;
  if (offsets_it != entry.end() && offsets_it->is_array() && offsets_it->size() == 2) {
    begin = find_unsigned((*offsets_it)[0]);
    end = find_unsigned((*offsets_it)[1]);
  }
  if (!begin || !end) {
    const std::string got = offsets_it == entry.end() ? "nothing" : brief_json(*offsets_it);
    return Error{where + ": data_offsets must be [begin, end] with non-negative integers, got " + got};
  }
  const std::string offsets_text = "[" + std::to_string(*begin) + ", " + std::to_string(*end) + "]";
  if (*begin > *end) return Error{where + " has reversed data_offsets " + offsets_text};
  if (*end > data_bytes) {
    return Error{where + " has data_offsets " + offsets_text + " past the end of the data (" +
                 std::to_string(data_bytes) + " bytes): the file is truncated or corrupt"};
  }
  if (*end - *begin != expected_bytes) {
    return Error{where + " of dtype " + dtype_text + " and shape " + shape_to_string(parsed.view.shape) + " needs " +
                 std::to_string(expected_bytes) + " bytes, but data_offsets " + offsets_text + " span " +
                 std::to_string(*end - *begin)};
  }
  parsed.begin = *begin;
  parsed.end = *end;
  parsed.view.data = data_start + *begin;
  parsed.view.size_bytes = expected_bytes;
  return parsed;
}

Result<void> check_no_overlap(const std::string& path, std::vector<ParsedTensor>& tensors) {
  std::vector<const ParsedTensor*> by_offset;
  for (const ParsedTensor& t : tensors) {
    if (t.end > t.begin) by_offset.push_back(&t);  // an empty tensor occupies no bytes
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const ParsedTensor* a, const ParsedTensor* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const ParsedTensor& prev = *by_offset[i - 1];
    const ParsedTensor& next = *by_offset[i];
    if (next.begin < prev.end) {
      return Error{path + ": tensors '" + prev.view.name + "' (bytes " + std::to_string(prev.begin) + "-" +
                   std::to_string(prev.end) + ") and '" + next.view.name + "' (bytes " + std::to_string(next.begin) +
                   "-" + std::to_string(next.end) + ") overlap"};
    }
  }
  return {};
}

}  // namespace

Result<std::vector<TensorView>> parse_safetensors_header(const MappedFile& file,
                                                         std::map<std::string, std::string>& metadata) {
  const std::string& path = file.path();
  const uint64_t file_bytes = file.size_bytes();
  if (file_bytes < kLengthBytes) {
    return Error{path + " is truncated: it has " + std::to_string(file_bytes) +
                 " bytes, fewer than the 8-byte header length of a safetensors file"};
  }
  uint64_t header_bytes = 0;
  for (uint64_t i = 0; i < kLengthBytes; ++i) header_bytes |= static_cast<uint64_t>(file.data()[i]) << (8 * i);
  if (header_bytes > kMaxHeaderBytes) {
    return Error{path + " is not a safetensors file: its header length " + std::to_string(header_bytes) +
                 " is over the format's 100 MB limit"};
  }
  if (header_bytes > file_bytes - kLengthBytes) {
    return Error{path + " is truncated: header says " + std::to_string(header_bytes) + " bytes, file has " +
                 std::to_string(file_bytes)};
  }
  const auto* header_start = reinterpret_cast<const char*>(file.data() + kLengthBytes);
  json header;
  try {
    header = json::parse(header_start, header_start + header_bytes);
  } catch (const json::exception& e) {
    return Error{path + ": the safetensors header is not valid JSON: " + e.what()};
  }
  if (!header.is_object()) {
    return Error{path + ": the safetensors header must be a JSON object, got " + brief_json(header)};
  }

  const uint8_t* data_start = file.data() + kLengthBytes + header_bytes;
  const uint64_t data_bytes = file_bytes - kLengthBytes - header_bytes;
  std::vector<ParsedTensor> parsed;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return Error{path + ": __metadata__ must be a JSON object of strings"};
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) {
          return Error{path + ": __metadata__ entry '" + key + "' must be a string, got " + brief_json(value)};
        }
        metadata.emplace(key, value.get<std::string>());
      }
      continue;
    }
    Result<ParsedTensor> tensor = parse_tensor_entry(path, name, entry, data_start, data_bytes);
    if (!tensor.ok()) return tensor.error();
    parsed.push_back(std::move(tensor).value());
  }
  DI_TRY(check_no_overlap(path, parsed));
  std::vector<TensorView> views;
  views.reserve(parsed.size());
  for (ParsedTensor& t : parsed) views.push_back(std::move(t.view));
  return views;
}

WeightStoreBuilder::WeightStoreBuilder(std::string source) { store_.source_ = std::move(source); }

Result<void> WeightStoreBuilder::add_file(const std::string& path) {
  Result<std::shared_ptr<MappedFile>> file = MappedFile::open(path);
  if (!file.ok()) return file.error();
  Result<std::vector<TensorView>> tensors = parse_safetensors_header(**file, store_.metadata_);
  if (!tensors.ok()) return tensors.error();
  for (TensorView& view : *tensors) {
    const auto [it, inserted] = store_.tensors_.emplace(view.name, view);
    if (!inserted) {
      return Error{"tensor '" + view.name + "' is in both " + it->second.file + " and " + path +
                   "; remove the stray file from the model directory"};
    }
  }
  store_.files_.push_back(std::move(file).value());
  return {};
}

int64_t TensorView::numel() const {
  int64_t count = 1;
  for (const int64_t dim : shape) count *= dim;
  return count;
}

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

Result<WeightStore> WeightStore::open_file(const std::string& path) {
  WeightStoreBuilder builder(path);
  DI_TRY(builder.add_file(path));
  return builder.finish();
}

std::optional<TensorView> WeightStore::find(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) return std::nullopt;
  return it->second;
}

Result<TensorView> WeightStore::get(const std::string& name, const std::vector<int64_t>& expected_shape) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) return Error{name + " is missing from " + source_};
  if (it->second.shape != expected_shape) {
    return Error{name + " in " + it->second.file + " has shape " + shape_to_string(it->second.shape) + ", expected " +
                 shape_to_string(expected_shape)};
  }
  if (it->second.dtype == DType::kU8) {
    return Error{name + " in " + it->second.file + " is U8 (raw bytes, such as MXFP4 blocks); a weight here must be " +
                 "F32, BF16, F16 or F8_E4M3"};
  }
  return it->second;
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> result;
  result.reserve(tensors_.size());
  for (const auto& entry : tensors_) result.push_back(entry.first);
  return result;
}

Result<WeightStore> WeightStore::with_prefixes_renamed(
    const std::vector<std::pair<std::string, std::string>>& renames) const {
  WeightStore renamed;
  renamed.files_ = files_;
  renamed.metadata_ = metadata_;
  std::map<std::string, std::string> original_of;
  std::vector<bool> used(renames.size(), false);
  for (const auto& [name, view] : tensors_) {
    std::string new_name = name;
    for (size_t r = 0; r < renames.size(); ++r) {
      const auto& [from, to] = renames[r];
      if (name.starts_with(from)) {
        new_name = to;
        new_name.append(name, from.size());
        used[r] = true;
        break;
      }
    }
    const auto [seen, first] = original_of.emplace(new_name, name);
    if (!first) {
      std::string message = source_;
      message.append(": tensors ").append(seen->second).append(" and ").append(name);
      message.append(" would both be read as ").append(new_name);
      return Error{message};
    }
    TensorView moved = view;
    moved.name = new_name;
    renamed.tensors_.emplace(new_name, std::move(moved));
  }
  // Errors then say which names were read as others, e.g. "... is missing from DIR
  // (language_model.model.* read as model.*)".
  renamed.source_ = source_;
  std::string how;
  for (size_t r = 0; r < renames.size(); ++r) {
    if (!used[r]) continue;
    how.append(how.empty() ? " (" : ", ").append(renames[r].first).append("* read as ").append(renames[r].second);
    how.append("*");
  }
  if (!how.empty()) renamed.source_.append(how).append(")");
  return renamed;
}

uint64_t WeightStore::total_bytes() const {
  uint64_t total = 0;
  for (const auto& entry : tensors_) total += entry.second.size_bytes;
  return total;
}

Result<void> write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorView*> sorted;
  for (const TensorView& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](const TensorView* a, const TensorView* b) { return a->name < b->name; });

  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const TensorView& t = *sorted[i];
    const std::string where = "cannot write " + path + ": tensor '" + t.name + "'";
    if (t.name == "__metadata__") return Error{where + " uses the reserved name __metadata__"};
    if (i > 0 && sorted[i - 1]->name == t.name) return Error{where + " is given twice"};
    if (std::any_of(t.shape.begin(), t.shape.end(), [](int64_t d) { return d < 0; })) {
      return Error{where + " has a negative dimension in shape " + shape_to_string(t.shape)};
    }
    const uint64_t expected_bytes = static_cast<uint64_t>(t.numel()) * dtype_size_bytes(t.dtype);
    if (t.size_bytes != expected_bytes) {
      return Error{where + " of shape " + shape_to_string(t.shape) + " holds " + std::to_string(t.size_bytes) +
                   " bytes, expected " + std::to_string(expected_bytes)};
    }
    if (t.data == nullptr && t.size_bytes > 0) return Error{where + " has no data"};
    header[t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.size_bytes}}};
    offset += t.size_bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    return Error{"cannot write " + path + ": a tensor name or metadata string is not valid UTF-8 (" + e.what() + ")"};
  }
  // Pad with spaces so the data starts 8-byte aligned, as the reference writer does.
  text.append((kLengthBytes - text.size() % kLengthBytes) % kLengthBytes, ' ');

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Error{"cannot create " + path + ": " + std::strerror(errno)};
  char length[kLengthBytes];
  for (uint64_t i = 0; i < kLengthBytes; ++i) length[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  out.write(length, kLengthBytes);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const TensorView* t : sorted) {
    out.write(static_cast<const char*>(t->data), static_cast<std::streamsize>(t->size_bytes));
  }
  out.flush();
  if (!out) return Error{"cannot write " + path + ": " + std::strerror(errno)};
  return {};
}

}  // namespace deepinfer
