// Helpers for the GPU tests: the CUDA backend (and its batch-invariant twin), a model loaded on it,
// host<->device
// arrays through the Backend interface, random data, checkpoints written tensor by tensor, host
// weights in any dtype, and the dtype-aware closeness check (threshold + |ref| * eps, llm.c style).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/model.h"
#include "runtime/backend.h"
#include "weights/safetensors.h"

namespace deepinfer::testing {

inline std::unique_ptr<Backend> cuda_backend(bool batch_invariant = false,
                                             std::optional<DType> kv_cache_dtype = std::nullopt) {
  BackendOptions options;
  options.batch_invariant = batch_invariant;
  options.kv_cache_dtype = kv_cache_dtype;
  auto backend = make_backend("cuda", options);
  if (!backend.ok()) throw std::runtime_error(backend.error().message);
  return std::move(*backend);
}

struct CudaModel {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<CausalLM> model;
};

// The model in dir on the CUDA backend (kv_cache_dtype: BackendOptions'); throws naming what failed.
inline CudaModel load_on_cuda(const std::string& dir, bool batch_invariant = false, bool graphs = true,
                              std::optional<DType> kv_cache_dtype = std::nullopt) {
  BackendOptions options;
  options.batch_invariant = batch_invariant;
  options.graphs = graphs;
  options.kv_cache_dtype = kv_cache_dtype;
  CudaModel loaded;
  auto backend = make_backend("cuda", options);
  if (!backend.ok()) throw std::runtime_error(backend.error().message);
  loaded.backend = std::move(*backend);
  auto model = load_model(dir, *loaded.backend, /*show_progress=*/false);
  if (!model.ok()) throw std::runtime_error(model.error().message);
  loaded.model = std::move(*model);
  return loaded;
}

inline std::vector<float> random_floats(std::mt19937& rng, size_t count, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> values(count);
  for (float& v : values) v = dist(rng);
  return values;
}

// A checkpoint's tensors, added one by one and written as dir/model.safetensors (the model tests'
// random checkpoints; the config is the caller's).
class CheckpointTensors {
 public:
  void add(const std::string& name, std::vector<int64_t> shape, DType dtype, std::vector<uint8_t> bytes) {
    const std::vector<uint8_t>& stored = storage_.emplace_back(std::move(bytes));
    TensorView t;
    t.name = name;
    t.dtype = dtype;
    t.shape = std::move(shape);
    t.data = stored.data();
    t.size_bytes = stored.size();
    tensors_.push_back(t);
  }
  // Values uniform in [mean - spread, mean + spread], rounded to bf16.
  void add_bf16(std::mt19937& rng, const std::string& name, std::vector<int64_t> shape, float mean, float spread) {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    std::vector<uint8_t> bytes(static_cast<size_t>(count) * 2);
    const std::vector<float> values = random_floats(rng, static_cast<size_t>(count), mean - spread, mean + spread);
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t bits = f32_to_bf16(values[i]);
      std::memcpy(&bytes[i * 2], &bits, 2);
    }
    add(name, std::move(shape), DType::kBF16, std::move(bytes));
  }
  void write(const std::string& dir) const {
    auto written = write_safetensors(dir + "/model.safetensors", tensors_, {{"format", "pt"}});
    if (!written.ok()) throw std::runtime_error(written.error().message);
  }

 private:
  std::deque<std::vector<uint8_t>> storage_;  // a deque: the views keep pointing at earlier tensors
  std::vector<TensorView> tensors_;
};

template <typename T>
DeviceBuffer upload(Backend& backend, const std::vector<T>& values) {
  DeviceBuffer buffer = backend.allocate(std::max<size_t>(values.size(), 1) * sizeof(T));
  if (!values.empty()) backend.copy_to_device(buffer.data(), values.data(), values.size() * sizeof(T));
  return buffer;
}

template <typename T>
std::vector<T> download(Backend& backend, const DeviceBuffer& buffer, size_t count) {
  std::vector<T> values(count);
  if (count > 0) backend.copy_to_host(values.data(), buffer.data(), count * sizeof(T));
  return values;
}

// A weight held on the host in its dtype: raw bits plus a float32 copy of the rounded values.
struct HostWeight {
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint8_t> bytes;
  std::vector<float> rounded;

  kernels::WeightView view() const { return kernels::WeightView{bytes.data(), dtype, rows, cols}; }
};

inline HostWeight make_weight(const std::vector<float>& values, DType dtype, int64_t rows, int64_t cols) {
  HostWeight w;
  w.dtype = dtype;
  w.rows = rows;
  w.cols = cols;
  w.bytes.resize(values.size() * dtype_size_bytes(dtype));
  w.rounded.resize(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(w.bytes.data() + i * 4, &values[i], 4);
      w.rounded[i] = values[i];
    } else {
      const uint16_t bits = dtype == DType::kBF16 ? f32_to_bf16(values[i]) : f32_to_f16(values[i]);
      std::memcpy(w.bytes.data() + i * 2, &bits, 2);
      w.rounded[i] = dtype == DType::kBF16 ? bf16_to_f32(bits) : f16_to_f32(bits);
    }
  }
  return w;
}

// x [rows, k] as the FP8 products quantise it (gemv_fp8.h): per row and 128 columns, codes of
// x * (448 / amax), scale amax / 448; back in float32.
inline std::vector<float> fp8_quantized_rows(const std::vector<float>& x, int64_t rows, int64_t k) {
  constexpr int64_t kBlock = 128;
  std::vector<float> q(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < k / kBlock; ++b) {
      const float* block = &x[r * k + b * kBlock];
      float amax = 0.0f;
      for (int64_t i = 0; i < kBlock; ++i) amax = std::max(amax, std::fabs(block[i]));
      const float inverse = amax > 0.0f ? 448.0f / amax : 0.0f;
      const float scale = amax / 448.0f;
      for (int64_t i = 0; i < kBlock; ++i) {
        q[r * k + b * kBlock + i] = f8e4m3_to_f32(f32_to_f8e4m3(block[i] * inverse)) * scale;
      }
    }
  }
  return q;
}

// A host weight as a checkpoint's [rows, cols] tensor named name (for load_stacked_weight).
inline TensorView tensor_of(const HostWeight& w, const std::string& name) {
  TensorView tensor;
  tensor.name = name;
  tensor.dtype = w.dtype;
  tensor.shape = {w.rows, w.cols};
  tensor.data = w.bytes.data();
  tensor.size_bytes = w.bytes.size();
  tensor.file = "test";
  return tensor;
}

// The backend's copy of a host weight (kept alive by the backend); one row loads as a vector.
inline kernels::WeightView load(Backend& backend, const HostWeight& w, const std::string& name = "test.weight") {
  TensorView tensor = tensor_of(w, name);
  if (w.rows == 1) tensor.shape = {w.cols};
  auto view = backend.load_weight(tensor);
  if (!view.ok()) throw std::runtime_error(view.error().message);
  return *view;
}

// |got - want| <= abs_tol + rel_tol * |want| for every element; reports the first miss and the
// largest error.
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double abs_tol,
                         double rel_tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0.0;
  size_t misses = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = std::abs(static_cast<double>(got[i]) - want[i]);
    worst = std::max(worst, diff);
    if (!(diff <= abs_tol + rel_tol * std::abs(want[i]))) {
      if (misses == 0) ADD_FAILURE() << what << ": index " << i << " got " << got[i] << " want " << want[i];
      ++misses;
    }
  }
  EXPECT_EQ(misses, 0u) << what << ": " << misses << " of " << got.size() << " outside tolerance, max |diff| "
                        << worst;
}

// A cache's pages are its own bytes: any pattern (NaNs included) written into two blocks through
// ordinary memory (per-piece copies) and into a third from a pinned slab (one scatter launch) comes
// back bit for bit.
inline void expect_pages_move_as_their_bytes(CausalLM& model) {
  model.allocate_kv_cache(KvCacheShape{8, 16});
  const auto page_bytes = static_cast<size_t>(model.full_kv_bytes_per_block());
  std::mt19937 rng(5);
  std::vector<uint8_t> written(2 * page_bytes);
  for (uint8_t& b : written) b = static_cast<uint8_t>(rng());
  model.write_full_kv_blocks({3, 6}, written.data());
  std::vector<uint8_t> got(2 * page_bytes);
  model.read_full_kv_blocks({3, 6}, got.data());
  EXPECT_TRUE(got == written) << "per-piece path changed the bytes";
  std::shared_ptr<HostSlabPool> pool = model.backend().make_pinned_pool(2 * page_bytes + 4096, page_bytes + 256);
  ASSERT_NE(pool, nullptr);
  auto* slab = static_cast<uint8_t*>(pool->take(page_bytes));
  ASSERT_NE(slab, nullptr);
  std::memcpy(slab, written.data() + page_bytes, page_bytes);
  model.write_full_kv_blocks({1}, slab);
  pool->give_back(slab);
  std::vector<uint8_t> slab_got(page_bytes);
  model.read_full_kv_blocks({1}, slab_got.data());
  EXPECT_TRUE(std::equal(slab_got.begin(), slab_got.end(), written.begin() + static_cast<ptrdiff_t>(page_bytes)))
      << "scatter path changed the bytes";
}

}  // namespace deepinfer::testing
