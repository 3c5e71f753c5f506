// oneDNN matmul for prefill: cached primitives per row bucket, weights wrapped in place as the
// transposed B operand ([N, K] row-major is a K x N matrix with strides (1, K)).
#include "kernels/cpu/onednn_matmul.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <dnnl.hpp>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "kernels/cpu/simd.h"
#include "kernels/ref/dequantize.h"

namespace deepinfer::kernels::cpu {
namespace {

// Rows per oneDNN call; larger batches loop, re-reading the weights once per 512 rows (cheap next
// to 512 rows of compute). A chunk's row count is rounded up to kRowQuantum, so at most
// 512 / 16 = 32 primitives exist per weight shape, and a short chunk computes < 16 padding rows.
constexpr int64_t kMaxChunkRows = 512;
constexpr int64_t kRowQuantum = 16;
// F16 (and, without oneDNN bf16, BF16) weights are converted to f32 in slabs of about this many floats (4 MiB: stays in
// L3).
constexpr int64_t kSlabFloats = int64_t{1} << 20;

struct PrimitiveKey {
  int64_t rows;
  int64_t n;
  int64_t k;
  int64_t ldy;
  bool bf16;
  bool operator==(const PrimitiveKey&) const = default;
};

struct PrimitiveKeyHash {
  size_t operator()(const PrimitiveKey& key) const {
    size_t h = std::hash<int64_t>()(key.rows);
    for (int64_t v : {key.n, key.k, key.ldy, static_cast<int64_t>(key.bf16)})
      h = h * 1000003u ^ std::hash<int64_t>()(v);
    return h;
  }
};

struct CachedMatmul {
  dnnl::matmul primitive;
  dnnl::memory::desc src_md;
  dnnl::memory::desc weights_md;
  dnnl::memory::desc dst_md;
  dnnl::memory::desc scratchpad_md;
};

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

std::shared_ptr<const CachedMatmul> create_matmul(const PrimitiveKey& key) {
  using dt = dnnl::memory::data_type;
  const dt in_type = key.bf16 ? dt::bf16 : dt::f32;
  auto cached = std::make_shared<CachedMatmul>();
  cached->src_md = dnnl::memory::desc({key.rows, key.k}, in_type, {key.k, 1});
  cached->weights_md = dnnl::memory::desc({key.k, key.n}, in_type, {1, key.k});
  cached->dst_md = dnnl::memory::desc({key.rows, key.n}, dt::f32, {key.ldy, 1});
  // A user scratchpad makes concurrent execution from several threads safe.
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(cached->src_md, cached->weights_md, cached->dst_md), attr,
                                        cpu_engine());
  cached->scratchpad_md = pd.scratchpad_desc();
  cached->primitive = dnnl::matmul(pd);
  return cached;
}

std::shared_ptr<const CachedMatmul> find_or_create_matmul(const PrimitiveKey& key) {
  static std::mutex mutex;
  static std::unordered_map<PrimitiveKey, std::shared_ptr<const CachedMatmul>, PrimitiveKeyHash> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = cache[key];
  if (!slot) slot = create_matmul(key);
  return slot;
}

// Per-thread growable buffers, so concurrent callers never share scratch memory.
struct Scratch {
  std::vector<char> src;
  std::vector<char> dst;
  std::vector<float> weights;
  std::vector<char> scratchpad;
  std::vector<float> rounded_x;
};

Scratch& thread_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

template <typename T>
T* grow(std::vector<T>& buffer, size_t count) {
  if (buffer.size() < count) buffer.resize(count);
  return buffer.data();
}

// y[rows, n] (row stride ldy) = x[rows, k] @ weights^T where weights is [n, k] of the input type.
void run_matmul(const float* x, const void* weights, bool bf16, int64_t rows, int64_t n, int64_t k, float* y,
                int64_t ldy) {
  Scratch& scratch = thread_scratch();
  for (int64_t m0 = 0; m0 < rows; m0 += kMaxChunkRows) {
    const int64_t chunk = std::min(kMaxChunkRows, rows - m0);
    const int64_t bucket = (chunk + kRowQuantum - 1) / kRowQuantum * kRowQuantum;
    const auto cached = find_or_create_matmul(PrimitiveKey{bucket, n, k, ldy, bf16});
    const float* x_chunk = x + m0 * k;

    // Source: bf16 always goes through a rounded copy; f32 only when padding rows are needed.
    const void* src = x_chunk;
    if (bf16) {
      auto* rounded = reinterpret_cast<uint16_t*>(grow(scratch.src, static_cast<size_t>(bucket * k) * 2));
#pragma omp parallel for schedule(static) if (chunk * k >= 65536)
      for (int64_t r = 0; r < chunk; ++r) round_row_to_bf16(x_chunk + r * k, k, rounded + r * k);
      std::memset(rounded + chunk * k, 0, static_cast<size_t>((bucket - chunk) * k) * 2);
      src = rounded;
    } else if (bucket != chunk) {
      auto* padded = reinterpret_cast<float*>(grow(scratch.src, static_cast<size_t>(bucket * k) * sizeof(float)));
      std::memcpy(padded, x_chunk, static_cast<size_t>(chunk * k) * sizeof(float));
      std::memset(padded + chunk * k, 0, static_cast<size_t>((bucket - chunk) * k) * sizeof(float));
      src = padded;
    }
    float* dst = y + m0 * ldy;
    if (bucket != chunk)
      dst = reinterpret_cast<float*>(grow(scratch.dst, static_cast<size_t>(bucket * ldy) * sizeof(float)));

    try {
      dnnl::engine& engine = cpu_engine();
      dnnl::stream stream(engine);
      dnnl::memory src_mem(cached->src_md, engine, const_cast<void*>(src));
      dnnl::memory weights_mem(cached->weights_md, engine, const_cast<void*>(weights));
      dnnl::memory dst_mem(cached->dst_md, engine, dst);
      // oneDNN's own scratchpads are 64-byte aligned; give it the same.
      char* scratchpad = grow(scratch.scratchpad, cached->scratchpad_md.get_size() + 64);
      scratchpad += (64 - reinterpret_cast<uintptr_t>(scratchpad) % 64) % 64;
      dnnl::memory scratchpad_mem(cached->scratchpad_md, engine, scratchpad);
      cached->primitive.execute(stream, {{DNNL_ARG_SRC, src_mem},
                                         {DNNL_ARG_WEIGHTS, weights_mem},
                                         {DNNL_ARG_DST, dst_mem},
                                         {DNNL_ARG_SCRATCHPAD, scratchpad_mem}});
      stream.wait();
    } catch (const dnnl::error& e) {
      DI_CHECK(false,
               "oneDNN matmul [" << bucket << ", " << k << "] x [" << k << ", " << n << "] failed: " << e.what());
    }
    if (bucket != chunk) {
      for (int64_t r = 0; r < chunk; ++r) {
        std::memcpy(y + (m0 + r) * ldy, dst + r * ldy, static_cast<size_t>(n) * sizeof(float));
      }
    }
  }
}

// Whether this CPU runs oneDNN's bf16 matmul (it needs AVX-512; AVX2 machines take the slab path).
bool bf16_matmul_supported() {
  static const bool supported = [] {
    try {
      create_matmul(PrimitiveKey{kRowQuantum, 16, 16, 16, true});
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return supported;
}

// No f16 GEMM on CPUs without AVX512-FP16, and none for block-quantised FP8 / MXFP4: convert a slab
// of weight rows to f32, multiply it into its columns of y, next slab. The conversion is O(N K)
// against the GEMM's O(M N K), and a packed weight is never whole in memory as floats.
void slab_matmul(const float* x, const WeightView& w, int64_t num_rows, float* y) {
  const int64_t n_out = w.rows;
  const int64_t k_in = w.cols;
  const int64_t slab_rows = std::clamp<int64_t>(kSlabFloats / std::max<int64_t>(k_in, 1) / 16 * 16, 16, 1024);
  float* slab = grow(thread_scratch().weights, static_cast<size_t>(std::min(slab_rows, n_out) * k_in));
  const bool packed = w.dtype == DType::kF8E4M3 || w.dtype == DType::kMxfp4;
  const auto* base = static_cast<const char*>(w.data);
  const int64_t row_bytes = packed ? 0 : k_in * static_cast<int64_t>(dtype_size_bytes(w.dtype));
  for (int64_t n0 = 0; n0 < n_out; n0 += slab_rows) {
    const int64_t rows = std::min(slab_rows, n_out - n0);
#pragma omp parallel for schedule(static) if (rows * k_in >= 65536)
    for (int64_t r = 0; r < rows; ++r) {
      if (packed) {
        ref::dequantize_weight_row(w, n0 + r, slab + r * k_in);
      } else {
        convert_row_to_f32(base + (n0 + r) * row_bytes, w.dtype, k_in, slab + r * k_in);
      }
    }
    run_matmul(x, slab, false, num_rows, rows, k_in, y + n0, n_out);
  }
}

// x rounded to bf16 and widened back: without oneDNN's bf16 matmul (CPUs without AVX-512), BF16
// weights then give the numbers the bf16 path gives, whatever the CPU.
const float* rounded_to_bf16(const float* x, int64_t count) {
  float* rounded = grow(thread_scratch().rounded_x, static_cast<size_t>(count));
#pragma omp parallel for schedule(static) if (count >= 65536)
  for (int64_t i = 0; i < count; ++i) rounded[i] = bf16_to_f32(f32_to_bf16(x[i]));
  return rounded;
}

}  // namespace

void onednn_matmul(const float* x, const WeightView& w, int64_t num_rows, float* y) {
  if (num_rows == 0 || w.rows == 0) return;
  switch (w.dtype) {
    case DType::kF32: return run_matmul(x, w.data, false, num_rows, w.rows, w.cols, y, w.rows);
    case DType::kBF16:
      if (bf16_matmul_supported()) return run_matmul(x, w.data, true, num_rows, w.rows, w.cols, y, w.rows);
      return slab_matmul(rounded_to_bf16(x, num_rows * w.cols), w, num_rows, y);
    case DType::kF16:
    case DType::kF8E4M3:
    case DType::kMxfp4: return slab_matmul(x, w, num_rows, y);
    default: DI_CHECK(false, "matmul weights must be F32, BF16, F16, F8_E4M3 or MXFP4, not " << dtype_name(w.dtype));
  }
}

}  // namespace deepinfer::kernels::cpu
