// fp8 (e4m3) KV caches on the GPU (--kv-cache-dtype fp8): write_kv's codes are the host's bits
// (core/dtype's f32_to_f8e4m3 of value / scale: ties, saturation, subnormals, skipped slots, with and
// without column scales); the fixtures with an fp8 cache against transformers' top logprobs and the
// checkpoint's k/v scales into the first layer's cached values, GQA and MLA (kv_cache_dtype_checks.h, the CPU's
// checks); the default model against transformers; a quarter of float32's cache bytes; and pages
// that move as their own bytes. The attention kernels over fp8 caches: test_cuda_attention.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "cuda_test_util.h"
#include "default_model_oracle.h"
#include "fixtures.h"
#include "kv_cache_dtype_checks.h"
#include "model/model.h"

namespace deepinfer::testing {
namespace {

std::unique_ptr<Backend> cuda_maker(std::optional<DType> kv_cache_dtype, bool batch_invariant) {
  return cuda_backend(batch_invariant, kv_cache_dtype);
}

TEST(CudaKvFp8, WriteKvCodesEqualTheHostsBits) {
  auto backend = cuda_backend();
  std::mt19937 rng(9);
  for (const int64_t kv_dim : {int64_t{128}, int64_t{36}, int64_t{10}}) {
    for (const bool with_scales : {true, false}) {
      constexpr int64_t kTokens = 5;
      constexpr int64_t kSlots = 9;
      std::vector<float> scales(static_cast<size_t>(kv_dim));
      for (float& s : scales) s = with_scales ? std::ldexp(static_cast<float>(9 + rng() % 7) / 8.0f, -4) : 1.0f;
      std::vector<float> k = random_floats(rng, static_cast<size_t>(kTokens * kv_dim), -30.0f, 30.0f);
      std::vector<float> v = random_floats(rng, k.size(), -0.05f, 0.05f);  // small: subnormal codes
      // A tie between two e4m3 values (1 + 1/16 lies between 1 and 1 + 1/8: the even one, 1, wins),
      // one past 448 (saturates), an infinity (saturates), a negative zero and the smallest subnormal.
      const float s0 = scales[0];
      const float s1 = scales[1];
      k[0] = (1.0f + 1.0f / 16) * s0;
      k[1] = 1000.0f * s1;
      k[2] = -std::numeric_limits<float>::infinity();
      k[3] = -0.0f;
      v[0] = std::ldexp(1.0f, -9) * s0;
      const std::vector<int32_t> slots = {3, -1, 0, 8, 5};
      const std::vector<uint8_t> sentinel(static_cast<size_t>(kSlots * kv_dim), 0x7f);  // NaN codes
      DeviceBuffer k_cache = upload(*backend, sentinel);
      DeviceBuffer v_cache = upload(*backend, sentinel);
      DeviceBuffer dk = upload(*backend, k);
      DeviceBuffer dv = upload(*backend, v);
      DeviceBuffer dslots = upload(*backend, slots);
      DeviceBuffer dscales = upload(*backend, scales);
      const kernels::KvScales kv_scales =
          with_scales ? kernels::KvScales{dscales.as<float>(), dscales.as<float>()} : kernels::KvScales{};
      backend->write_kv(dk.as<float>(), dv.as<float>(), dslots.as<int32_t>(), kTokens, kv_dim, DType::kF8E4M3,
                        kv_scales, k_cache.data(), v_cache.data());
      const auto got_k = download<uint8_t>(*backend, k_cache, sentinel.size());
      const auto got_v = download<uint8_t>(*backend, v_cache, sentinel.size());
      std::vector<uint8_t> want_k = sentinel;
      std::vector<uint8_t> want_v = sentinel;
      for (int64_t t = 0; t < kTokens; ++t) {
        const int32_t slot = slots[static_cast<size_t>(t)];
        if (slot < 0) continue;
        for (int64_t d = 0; d < kv_dim; ++d) {
          const auto i = static_cast<size_t>(t * kv_dim + d);
          const float scale = scales[static_cast<size_t>(d)];
          // The host backend's write: value / scale, coded (pack_row in kernels/cpu/attention.cpp).
          want_k[static_cast<size_t>(slot * kv_dim + d)] = f32_to_f8e4m3(with_scales ? k[i] / scale : k[i]);
          want_v[static_cast<size_t>(slot * kv_dim + d)] = f32_to_f8e4m3(with_scales ? v[i] / scale : v[i]);
        }
      }
      const std::string what = "kv_dim " + std::to_string(kv_dim) + (with_scales ? " scaled" : " unscaled");
      EXPECT_EQ(got_k, want_k) << what;
      EXPECT_EQ(got_v, want_v) << what;
      const size_t row = static_cast<size_t>(3 * kv_dim);  // token 0's slot
      if (with_scales) {
        EXPECT_EQ(got_k[row], 0x38) << what << ": 1 + 1/16 rounds to 1";
        EXPECT_EQ(got_k[row + 1], 0x7e) << what << ": 1000 saturates to 448";
        EXPECT_EQ(got_v[row], 0x01) << what << ": 2^-9, the smallest subnormal";
      }
      EXPECT_EQ(got_k[row + 2], 0xfe) << what << ": -inf saturates to -448";
      EXPECT_EQ(got_k[row + 3], 0x80) << what << ": -0 keeps its sign";
    }
  }
}

TEST(CudaKvFp8, HoldsAQuarterOfFloat32sBytes) {
  for (const char* name : {"llama", "deepseek_v3"}) {
    CudaModel f32 = load_on_cuda(fixture_dir(name));
    CudaModel fp8 = load_on_cuda(fixture_dir(name), false, true, DType::kF8E4M3);
    EXPECT_EQ(f32.model->kv_cache_dtype(), DType::kF32) << name;
    EXPECT_EQ(fp8.model->kv_cache_dtype(), DType::kF8E4M3) << name;
    EXPECT_EQ(fp8.model->kv_bytes_per_token() * 4, f32.model->kv_bytes_per_token()) << name;
  }
}

TEST(CudaKvFp8, FixturesKeepTransformersTopTokens) { expect_fp8_fixtures_keep_top_tokens(cuda_maker, "cuda"); }

TEST(CudaKvFp8, CheckpointScalesCodeEveryCachedValue) { expect_checkpoint_scales_code_every_value(cuda_maker); }

TEST(CudaKvFp8, MlaLatentRowsTakeTheirKScale) { expect_mla_latent_rows_take_k_scale(cuda_maker); }

// The shipped default model (bf16 weights, MLA's latent cache, graphs at decode) with an fp8 cache on
// the default CUDA path, held to the CPU's fp8 bounds (test_kv_cache_dtype.cpp: e4m3's 3 mantissa
// bits on this 13.9M model's 80-wide latent rows).
TEST(CudaKvFp8, DefaultModelAgreesWithTransformers) {
  auto backend = cuda_backend(false, DType::kF8E4M3);
  expect_fast_path_agrees(*backend, "cuda fp8 KV", 1.0, 0.04, 0.8);
}

// An fp8 cache's pages are a quarter of float32's and move as their own bytes.
TEST(CudaKvFp8, PagesMoveAsTheirOwnBytes) {
  CudaModel fp8 = load_on_cuda(fixture_dir("qwen3"), false, true, DType::kF8E4M3);
  CudaModel f32 = load_on_cuda(fixture_dir("qwen3"));
  EXPECT_EQ(4 * fp8.model->full_kv_bytes_per_block(), f32.model->full_kv_bytes_per_block());
  expect_pages_move_as_their_bytes(*fp8.model);
}

}  // namespace
}  // namespace deepinfer::testing
