// The bf16 KV cache on the GPU: write_kv's rounding (nearest even, skipped slots), which models get
// a bf16 cache (16-bit weights outside the batch-invariant mode), its halved bytes per token, and
// the float32 host transfer of its blocks (widened exactly, rounded on the way back). And the fused
// attention front end (qk-norm, rope, cache write into float32, bf16 or fp8 caches) against Backend's
// unfused sequence of ops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>

#include "bf16_model.h"
#include "cuda_test_util.h"
#include "fixtures.h"
#include "model/model.h"

namespace deepinfer::testing {
namespace {

TEST(CudaKvBf16, WriteKvRoundsToNearestEvenAndSkipsNegativeSlots) {
  auto backend = cuda_backend();
  std::mt19937 rng(7);
  for (const int64_t kv_dim : {int64_t{128}, int64_t{36}, int64_t{10}}) {
    constexpr int64_t kTokens = 5;
    constexpr int64_t kSlots = 9;
    std::vector<float> k = random_floats(rng, static_cast<size_t>(kTokens * kv_dim), -3.0f, 3.0f);
    std::vector<float> v = random_floats(rng, k.size(), -3.0f, 3.0f);
    // Exact ties between two bf16 values: the even one wins (1 + 2^-8 -> 1, 1 + 3 * 2^-8 -> 1 + 2^-6).
    k[0] = 1.0f + 1.0f / 256;
    k[1] = 1.0f + 3.0f / 256;
    v[0] = -(1.0f + 1.0f / 256);
    const std::vector<int32_t> slots = {3, -1, 0, 8, 5};
    const std::vector<uint16_t> sentinel(static_cast<size_t>(kSlots * kv_dim), 0x7fc1);  // a NaN pattern
    DeviceBuffer k_cache = upload(*backend, sentinel);
    DeviceBuffer v_cache = upload(*backend, sentinel);
    DeviceBuffer dk = upload(*backend, k);
    DeviceBuffer dv = upload(*backend, v);
    DeviceBuffer dslots = upload(*backend, slots);
    backend->write_kv(dk.as<float>(), dv.as<float>(), dslots.as<int32_t>(), kTokens, kv_dim, DType::kBF16, {},
                      k_cache.data(), v_cache.data());
    const auto got_k = download<uint16_t>(*backend, k_cache, sentinel.size());
    const auto got_v = download<uint16_t>(*backend, v_cache, sentinel.size());
    std::vector<uint16_t> want_k = sentinel;
    std::vector<uint16_t> want_v = sentinel;
    for (int64_t t = 0; t < kTokens; ++t) {
      const int32_t slot = slots[static_cast<size_t>(t)];
      if (slot < 0) continue;
      for (int64_t d = 0; d < kv_dim; ++d) {
        want_k[static_cast<size_t>(slot * kv_dim + d)] = f32_to_bf16(k[static_cast<size_t>(t * kv_dim + d)]);
        want_v[static_cast<size_t>(slot * kv_dim + d)] = f32_to_bf16(v[static_cast<size_t>(t * kv_dim + d)]);
      }
    }
    EXPECT_EQ(got_k, want_k) << "kv_dim " << kv_dim;
    EXPECT_EQ(got_v, want_v) << "kv_dim " << kv_dim;
    EXPECT_EQ(got_k[static_cast<size_t>(3 * kv_dim)], 0x3f80) << "1 + 2^-8 rounds to 1";
    EXPECT_EQ(got_k[static_cast<size_t>(3 * kv_dim + 1)], 0x3f82) << "1 + 3 * 2^-8 rounds to 1 + 2^-6";
  }
}

struct FrontCase {
  int32_t num_heads = 8;
  int32_t num_kv_heads = 2;
  int32_t head_dim = 128;
  int32_t rotary_dim = 128;
  bool qk_norm = false;
  kernels::RopeLayout layout = kernels::RopeLayout::kRotateHalf;
  DType cache_dtype = DType::kF32;
  // q, k and v as column ranges of one [q|k|v] row, as the stacked product leaves them; q goes to q_out.
  bool strided = false;
};

struct FrontResult {
  std::vector<float> q, k_cache, v_cache;  // caches widened to float32
};

constexpr int64_t kFrontTokens = 7;
constexpr int64_t kFrontSlots = 12;

// Runs the front end on fixed random inputs: fused (the backend's override) or the base class's
// rms_norm / rope / write_kv sequence on the same device.
FrontResult run_front(Backend& backend, const FrontCase& c, bool fused) {
  std::mt19937 rng(17);
  const int64_t q_dim = int64_t{c.num_heads} * c.head_dim;
  const int64_t kv_dim = int64_t{c.num_kv_heads} * c.head_dim;
  const int64_t n = kFrontTokens;
  const std::vector<float> q = random_floats(rng, static_cast<size_t>(n * q_dim), -2.0f, 2.0f);
  const std::vector<float> k = random_floats(rng, static_cast<size_t>(n * kv_dim), -2.0f, 2.0f);
  const std::vector<float> v = random_floats(rng, static_cast<size_t>(n * kv_dim), -2.0f, 2.0f);
  const std::vector<int32_t> positions = {0, 1, 17, 300, 4095, 9, 70000};
  const std::vector<int32_t> slots = {5, -1, 0, 11, 3, 7, 8};
  std::vector<float> inv_freq(static_cast<size_t>(c.rotary_dim / 2));
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    inv_freq[i] = static_cast<float>(1.0 / std::pow(500000.0, 2.0 * static_cast<double>(i) / c.rotary_dim));
  }
  const HostWeight q_norm = make_weight(random_floats(rng, static_cast<size_t>(c.head_dim), 0.5f, 1.5f), DType::kBF16,
                                        1, c.head_dim);
  const HostWeight k_norm = make_weight(random_floats(rng, static_cast<size_t>(c.head_dim), 0.5f, 1.5f), DType::kBF16,
                                        1, c.head_dim);

  const int64_t row = q_dim + 2 * kv_dim;
  std::vector<float> packed(static_cast<size_t>(n * row));
  for (int64_t t = 0; t < n; ++t) {
    std::copy_n(q.begin() + t * q_dim, q_dim, packed.begin() + t * row);
    std::copy_n(k.begin() + t * kv_dim, kv_dim, packed.begin() + t * row + q_dim);
    std::copy_n(v.begin() + t * kv_dim, kv_dim, packed.begin() + t * row + q_dim + kv_dim);
  }
  DeviceBuffer dq = upload(backend, q);
  DeviceBuffer dk = upload(backend, k);
  DeviceBuffer dv = upload(backend, v);
  DeviceBuffer dpacked = upload(backend, packed);
  DeviceBuffer dq_out = upload(backend, std::vector<float>(q.size(), std::numeric_limits<float>::quiet_NaN()));
  DeviceBuffer dpositions = upload(backend, positions);
  DeviceBuffer dslots = upload(backend, slots);
  DeviceBuffer dinv_freq = upload(backend, inv_freq);
  // An fp8 cache's column scales: 8 to 15 eighths of 2^-4 or 2^-5.
  std::vector<float> k_scales(static_cast<size_t>(kv_dim));
  std::vector<float> v_scales(k_scales.size());
  for (std::vector<float>* scales : {&k_scales, &v_scales}) {
    for (float& x : *scales) x = std::ldexp(static_cast<float>(8 + rng() % 8) / 8.0f, -4 - static_cast<int>(rng() % 2));
  }
  DeviceBuffer dk_scales = upload(backend, k_scales);
  DeviceBuffer dv_scales = upload(backend, v_scales);
  const size_t element = dtype_size_bytes(c.cache_dtype);
  DeviceBuffer k_cache = backend.allocate(static_cast<size_t>(kFrontSlots * kv_dim) * element);
  DeviceBuffer v_cache = backend.allocate(static_cast<size_t>(kFrontSlots * kv_dim) * element);

  kernels::AttentionFrontEnd f;
  if (c.strided) {
    f.q = dpacked.as<float>();
    f.k = f.q + q_dim;
    f.v = f.q + q_dim + kv_dim;
    f.q_stride = f.k_stride = f.v_stride = row;
    f.q_out = dq_out.as<float>();
  } else {
    f.q = dq.as<float>();
    f.k = dk.as<float>();
    f.v = dv.as<float>();
    f.q_stride = q_dim;
    f.k_stride = f.v_stride = kv_dim;
  }
  f.num_tokens = n;
  f.num_heads = c.num_heads;
  f.num_kv_heads = c.num_kv_heads;
  f.head_dim = c.head_dim;
  if (c.qk_norm) {
    f.q_norm = load(backend, q_norm, "q_norm");
    f.k_norm = load(backend, k_norm, "k_norm");
    f.norm_weight_offset = 0.25f;
    f.norm_eps = 1e-6f;
  }
  f.positions = dpositions.as<int32_t>();
  f.rotary_dim = c.rotary_dim;
  f.inv_freq = dinv_freq.as<float>();
  f.attention_scaling = 1.25f;
  f.layout = c.layout;
  f.slot_mapping = dslots.as<int32_t>();
  f.cache_dtype = c.cache_dtype;
  if (c.cache_dtype == DType::kF8E4M3) f.cache_scales = {dk_scales.as<float>(), dv_scales.as<float>()};
  f.k_cache = k_cache.data();
  f.v_cache = v_cache.data();
  if (fused) {
    backend.attention_front_end(f);
  } else {
    backend.Backend::attention_front_end(f);
  }

  FrontResult result;
  result.q = download<float>(backend, c.strided ? dq_out : dq, q.size());
  const auto count = static_cast<size_t>(kFrontSlots * kv_dim);
  if (c.cache_dtype == DType::kBF16) {
    for (const auto& [cache, dst] : {std::pair{&k_cache, &result.k_cache}, std::pair{&v_cache, &result.v_cache}}) {
      for (uint16_t bits : download<uint16_t>(backend, *cache, count)) dst->push_back(bf16_to_f32(bits));
    }
  } else if (c.cache_dtype == DType::kF8E4M3) {
    for (const auto& [cache, dst, scales] :
         {std::tuple{&k_cache, &result.k_cache, &k_scales}, std::tuple{&v_cache, &result.v_cache, &v_scales}}) {
      const std::vector<uint8_t> codes = download<uint8_t>(backend, *cache, count);
      for (size_t i = 0; i < codes.size(); ++i) {
        dst->push_back(f8e4m3_to_f32(codes[i]) * (*scales)[i % scales->size()]);
      }
    }
  } else {
    result.k_cache = download<float>(backend, k_cache, count);
    result.v_cache = download<float>(backend, v_cache, count);
  }
  return result;
}

TEST(CudaAttentionFrontEnd, FusedEqualsUnfusedOps) {
  auto backend = cuda_backend();
  std::vector<FrontCase> cases;
  for (DType cache : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
    for (bool norm : {false, true}) {
      for (int32_t head_dim : {64, 128, 256}) {
        FrontCase c;
        c.head_dim = head_dim;
        c.rotary_dim = head_dim;
        c.qk_norm = norm;
        c.cache_dtype = cache;
        cases.push_back(c);
      }
    }
  }
  FrontCase partial;  // partial rotary on an odd head size, interleaved pairs, 9 heads over 3
  partial.num_heads = 9;
  partial.num_kv_heads = 3;
  partial.head_dim = 80;
  partial.rotary_dim = 32;
  partial.qk_norm = true;
  partial.layout = kernels::RopeLayout::kInterleaved;
  cases.push_back(partial);
  partial.cache_dtype = DType::kBF16;
  cases.push_back(partial);
  partial.cache_dtype = DType::kF8E4M3;
  cases.push_back(partial);
  for (const FrontCase& c : cases) {
    const std::string what = "heads " + std::to_string(c.num_heads) + "/" + std::to_string(c.num_kv_heads) + " dim " +
                             std::to_string(c.head_dim) + " rotary " + std::to_string(c.rotary_dim) +
                             (c.qk_norm ? " qk-norm" : "") + " cache " + std::string(dtype_name(c.cache_dtype));
    const FrontResult want = run_front(*backend, c, false);
    FrontCase strided = c;
    strided.strided = true;
    for (const FrontCase& variant : {c, strided}) {
      const FrontResult got = run_front(*backend, variant, true);
      const std::string label = what + (variant.strided ? " strided" : "");
      // Only the norm's sum of squares is reduced in another order: a few float32 ulps. In a bf16
      // cache such a difference can cross a rounding boundary: one bf16 ulp (2^-8 relative); in an
      // fp8 one an e4m3 step (2^-3 relative, or 2^-9 times the scale below 2^-6).
      expect_close(got.q, want.q, 1e-5, 1e-5, label + " q");
      const bool fp8 = c.cache_dtype == DType::kF8E4M3;
      const double cache_rel = fp8 ? 1.0 / 8 : c.cache_dtype == DType::kBF16 ? 1.0 / 128 : 1e-5;
      expect_close(got.k_cache, want.k_cache, fp8 ? 2.5e-4 : 1e-5, cache_rel, label + " k cache");
      EXPECT_EQ(got.v_cache, want.v_cache) << label << " v cache";
    }
  }
}

TEST(CudaKvBf16, SixteenBitModelsGetHalfTheCacheBytes) {
  const std::string bf16_dir = write_bf16_copy(fixture_dir("qwen3"), "qwen3");
  CudaModel f32 = load_on_cuda(fixture_dir("qwen3"), false);
  CudaModel bf16 = load_on_cuda(bf16_dir, false);
  CudaModel invariant = load_on_cuda(bf16_dir, true);
  EXPECT_EQ(f32.model->kv_cache_dtype(), DType::kF32);
  EXPECT_EQ(bf16.model->kv_cache_dtype(), DType::kBF16);
  EXPECT_EQ(invariant.model->kv_cache_dtype(), DType::kF32) << "batch-invariant mode keeps float32";
  EXPECT_EQ(2 * bf16.model->kv_bytes_per_token(), f32.model->kv_bytes_per_token());
  EXPECT_EQ(bf16.model->kv_floats_per_block(), f32.model->kv_floats_per_block()) << "host transfers stay float32";
}

// Blocks written from the host are rounded to bf16 and read back widened; a block copy moves them
// bit for bit.
TEST(CudaKvBf16, HostBlockTransfersRoundTrip) {
  CudaModel loaded = load_on_cuda(write_bf16_copy(fixture_dir("qwen3"), "qwen3"), false);
  CausalLM& model = *loaded.model;
  constexpr int32_t kBlocks = 6;
  model.allocate_kv_cache(KvCacheShape{kBlocks, 16});
  const auto floats = static_cast<size_t>(model.kv_floats_per_block());
  std::mt19937 rng(11);
  const std::vector<float> written = random_floats(rng, 2 * floats, -4.0f, 4.0f);
  model.write_kv_blocks({4, 1}, written.data());
  model.copy_kv_blocks({{1, 2}});
  std::vector<float> got(3 * floats, std::numeric_limits<float>::quiet_NaN());
  model.read_kv_blocks({4, 1, 2}, got.data());
  for (size_t i = 0; i < 2 * floats; ++i) {
    ASSERT_EQ(got[i], bf16_to_f32(f32_to_bf16(written[i]))) << "element " << i;
  }
  EXPECT_EQ(std::memcmp(got.data() + floats, got.data() + 2 * floats, floats * sizeof(float)), 0);
}

}  // namespace
}  // namespace deepinfer::testing
