// FP8 block-scaled weights kept as FP8 on the GPU: the decode-size kernels (gemv.h for one or two
// rows, x in float32, with the residual-add and activation epilogues; gemv_fp8.h and
// gemm_fp8_swapped.h up to 64 rows, x quantised per 128 columns) against a float64 product of the
// same e4m3 values (and the bound x's quantisation keeps to against float x); cuBLASLt's
// block-scaled FP8 GEMM of larger batches over the same quantised x; a scale layout the kernels do
// not take falling back to float32; and whole FP8 Llama-, Qwen3-MoE- and DeepSeek-V3-shaped models
// against the same checkpoints dequantised at load.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/dtype.h"
#include "cuda_test_util.h"
#include "engine/generator.h"
#include "kernels/cuda/gemm_fp8_swapped.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/gemv_fp8.h"
#include "kernels/ops.h"
#include "kernels/ref/dequantize.h"
#include "model/model.h"
#include "sampling/logprobs.h"

namespace deepinfer::testing {
namespace {

constexpr int64_t kBlock = 128;

// A random e4m3 weight with one float32 scale per block_rows x block_cols block (NaN codes left out).
struct Fp8Weight {
  int64_t rows = 0;
  int64_t cols = 0;
  int32_t block_rows = 0;
  int32_t block_cols = 0;
  std::vector<uint8_t> codes;
  std::vector<float> scales;

  static Fp8Weight random(std::mt19937& rng, int64_t rows, int64_t cols, int32_t block_rows, int32_t block_cols) {
    Fp8Weight w{rows, cols, block_rows, block_cols, {}, {}};
    std::uniform_int_distribution<int> code(0, 255);
    w.codes.resize(static_cast<size_t>(rows * cols));
    for (uint8_t& c : w.codes) {
      do {
        c = static_cast<uint8_t>(code(rng));
      } while ((c & 0x7f) == 0x7f);
    }
    const int64_t scale_count = (rows + block_rows - 1) / block_rows * ((cols + block_cols - 1) / block_cols);
    w.scales = random_floats(rng, static_cast<size_t>(scale_count), 1.0f / 4096, 1.0f / 256);
    return w;
  }
  kernels::WeightView view() const {
    kernels::WeightView v;
    v.data = codes.data();
    v.dtype = DType::kF8E4M3;
    v.rows = rows;
    v.cols = cols;
    v.scales = scales.data();
    v.scale_block_rows = block_rows;
    v.scale_block_cols = block_cols;
    return v;
  }
  std::vector<float> dequantized() const {
    std::vector<float> values(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) kernels::ref::dequantize_weight_row(view(), r, &values[r * cols]);
    return values;
  }
};

// y[m, n] = sum_k x[m, k] w[n, k] in float64, and sum_k |x w| for the tolerance.
void product(const std::vector<float>& x, const std::vector<float>& w, int64_t m, int64_t n, int64_t k,
             std::vector<double>& y, std::vector<double>& magnitude) {
  y.assign(static_cast<size_t>(m * n), 0.0);
  magnitude.assign(y.size(), 0.0);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      double sum = 0.0, abs_sum = 0.0;
      for (int64_t i = 0; i < k; ++i) {
        const double term = static_cast<double>(x[r * k + i]) * w[c * k + i];
        sum += term;
        abs_sum += std::fabs(term);
      }
      y[r * n + c] = sum;
      magnitude[r * n + c] = abs_sum;
    }
  }
}

class CudaFp8 : public ::testing::Test {
 protected:
  void SetUp() override { backend_ = cuda_backend(); }
  // bias: a device bias of w.rows values, or none.
  std::vector<float> run(const Fp8Weight& w, const std::vector<float>& x, int64_t m,
                         const kernels::WeightView& bias = kernels::WeightView{}) {
    auto loaded = backend_->load_packed_weight(w.view());
    if (!loaded.ok()) throw std::runtime_error(loaded.error().message);
    EXPECT_EQ(loaded->dtype, DType::kF8E4M3) << "a 128 x 128 layout stays FP8 on the device";
    DeviceBuffer dx = upload(*backend_, x);
    DeviceBuffer dy = backend_->allocate(static_cast<size_t>(m * w.rows) * sizeof(float));
    backend_->matmul(dx.as<float>(), *loaded, bias, m, dy.as<float>());
    return download<float>(*backend_, dy, static_cast<size_t>(m * w.rows));
  }
  std::unique_ptr<Backend> backend_;
  std::mt19937 rng_{2027};
};

TEST_F(CudaFp8, BackendKeepsFp8AndMxfp4Packed) {
  EXPECT_TRUE(backend_->reads_packed_weights(DType::kF8E4M3, WeightUse::kMatmul));
  EXPECT_TRUE(backend_->reads_packed_weights(DType::kF8E4M3, WeightUse::kExperts));
  EXPECT_FALSE(backend_->reads_packed_weights(DType::kMxfp4, WeightUse::kMatmul));
  EXPECT_TRUE(backend_->reads_packed_weights(DType::kMxfp4, WeightUse::kExperts));
  const auto invariant = cuda_backend(/*batch_invariant=*/true);
  EXPECT_FALSE(invariant->reads_packed_weights(DType::kF8E4M3, WeightUse::kMatmul));
  EXPECT_FALSE(invariant->reads_packed_weights(DType::kF8E4M3, WeightUse::kExperts));
  EXPECT_FALSE(invariant->reads_packed_weights(DType::kMxfp4, WeightUse::kExperts));
}

// Decode sizes: one and two rows (gemv.h, x in float32), every row count of fp8_gemv's tile widths
// for small weights (up to 16 rows), the swapped wgmma kernel past that and from two rows for
// larger ones (gemm_fp8_swapped.h: every width it pads to, rows not a multiple of 16, a weight of
// fewer than 128 rows, 68 tiles on one block each, K split over blocks, and K long enough to need
// splits of its own); one and many column blocks per warp, an odd number of blocks.
TEST_F(CudaFp8, DecodeKernelMatchesQuantisedReference) {
  namespace kc = kernels::cuda;
  struct Shape {
    int64_t n, k;
    std::vector<int64_t> rows;
  };
  const std::vector<int64_t> rows = {1, 2, 5, 8, 9, 16, 17, 32, 33, 64};
  for (const Shape& s : {Shape{16, 128, rows}, Shape{100, 384, rows}, Shape{576, 7168, rows}, Shape{1000, 1536, rows},
                         Shape{4096, 1152, rows}, Shape{8704, 1024, {2, 5, 16, 17, 33, 64}},
                         Shape{4224, 2048, {2, 9, 17, 64}}, Shape{8704, 8320, {3, 17}}}) {
    const Fp8Weight w = Fp8Weight::random(rng_, s.n, s.k, kBlock, kBlock);
    const std::vector<float> dense = w.dequantized();
    for (int64_t m : s.rows) {
      char what[64];
      std::snprintf(what, sizeof(what), "[%lld, %lld] at M = %lld", static_cast<long long>(s.n),
                    static_cast<long long>(s.k), static_cast<long long>(m));
      const std::vector<float> x = random_floats(rng_, static_cast<size_t>(m * s.k));
      const std::vector<float> got = run(w, x, m);
      std::vector<double> want, magnitude, exact, exact_magnitude;
      product(x, dense, m, s.n, s.k, exact, exact_magnitude);
      const bool swapped = m >= kc::kFp8SwappedMinRows && m <= kc::kFp8SwappedMaxRows &&
                           (s.n * s.k >= kc::kFp8GemvSmallWeight || m > kc::kFp8GemvAlwaysRows);
      // One or two rows on gemv.h's kernel read x in float32: the exact product.
      if (!swapped && m <= kc::kGemvMaxRows) {
        want = exact;
        magnitude = exact_magnitude;
      } else {
        product(fp8_quantized_rows(x, m, s.k), dense, m, s.n, s.k, want, magnitude);
      }
      // Float32 sums of the same products; a wrong column pairing is off by ~sqrt(K) terms. wgmma's
      // FP8 sums keep fewer bits inside a 128-column block (as cuBLASLt's, below): on an H100 the
      // swapped kernel's worst value was 5.4e-4 of the magnitude.
      const double bound = swapped ? 1e-3 : 1e-5;
      size_t misses = 0, quantisation_misses = 0;
      double worst = 0.0;  // of |got - want| / magnitude
      for (size_t i = 0; i < got.size(); ++i) {
        if (!(std::fabs(got[i] - want[i]) <= bound * magnitude[i] + 1e-6)) ++misses;
        worst = std::max(worst, std::fabs(got[i] - want[i]) / magnitude[i]);
        // e4m3 keeps x within 2^-4 relative, plus half its smallest subnormal step.
        if (!(std::fabs(got[i] - exact[i]) <= 0.0625 * exact_magnitude[i] + 1e-6)) ++quantisation_misses;
      }
      EXPECT_EQ(misses, 0u) << what << (swapped ? " (swapped kernel)" : "") << ", worst error " << worst
                            << " of the magnitude";
      EXPECT_EQ(quantisation_misses, 0u) << what;
    }
  }
}

// A bias lands once on every decode and prompt path (gemv.h's epilogue at one and two rows, an add
// after the swapped kernel, fp8_gemv and cuBLASLt): the product without it, plus the bf16 bias.
TEST_F(CudaFp8, BiasIsAddedOnceOnEveryPath) {
  const Fp8Weight w = Fp8Weight::random(rng_, 4096, 1152, kBlock, kBlock);
  const HostWeight bias = make_weight(random_floats(rng_, 4096), DType::kBF16, 1, 4096);
  const kernels::WeightView device_bias = load(*backend_, bias);
  for (int64_t m : {1, 2, 9, 17, 64, 100}) {
    const std::vector<float> x = random_floats(rng_, static_cast<size_t>(m * w.cols));
    const std::vector<float> plain = run(w, x, m);
    const std::vector<float> got = run(w, x, m, device_bias);
    size_t misses = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const float want = plain[i] + bias.rounded[i % 4096];
      if (!(std::fabs(got[i] - want) <= 1e-5f * std::fabs(want) + 1e-6f)) ++misses;
    }
    EXPECT_EQ(misses, 0u) << "M = " << m;
  }
}

// Past kFp8GemvMaxRows cuBLASLt's block-scaled FP8 GEMM takes the product, over x quantised as
// fp8_gemv quantises it. Against a float64 product of the same quantised x: FP8 tensor-core sums
// keep fewer bits than float32 inside each 128-column block, hence the looser bound. That it is this
// path and not the bf16 one: its results sit far closer to the quantised-x product than to the
// product of x rounded to bf16. N past the last full scale block, long K, M not a multiple of 4
// (its last M % 4 rows on fp8_gemv). K of 5 scale blocks (cuBLASLt would read the weight's scale rows padded to 8)
// takes the bf16 path: x and the weight rounded to bf16.
TEST_F(CudaFp8, PrefillPathMatchesQuantisedReference) {
  struct Case {
    int64_t m, n, k;
  };
  for (const Case& c : {Case{68, 300, 1024}, Case{100, 300, 1024}, Case{204, 256, 7168}, Case{520, 384, 512},
                        Case{128, 200, 640}, Case{65, 300, 1024}, Case{201, 256, 1024}, Case{67, 384, 512}}) {
    const Fp8Weight w = Fp8Weight::random(rng_, c.n, c.k, kBlock, kBlock);
    const std::vector<float> dense = w.dequantized();
    const std::vector<float> x = random_floats(rng_, static_cast<size_t>(c.m * c.k));
    const std::vector<float> got = run(w, x, c.m);
    const std::string what =
        "M = " + std::to_string(c.m) + ", N = " + std::to_string(c.n) + ", K = " + std::to_string(c.k);
    std::vector<float> x_bf16 = x;
    for (float& v : x_bf16) v = bf16_to_f32(f32_to_bf16(v));
    std::vector<double> rounded, rounded_magnitude;
    if ((c.k / kBlock) % 4 != 0) {
      std::vector<float> dense_bf16 = dense;
      for (float& v : dense_bf16) v = bf16_to_f32(f32_to_bf16(v));
      product(x_bf16, dense_bf16, c.m, c.n, c.k, rounded, rounded_magnitude);
      size_t misses = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        if (!(std::fabs(got[i] - rounded[i]) <= 1e-5 * rounded_magnitude[i] + 1e-6)) ++misses;
      }
      EXPECT_EQ(misses, 0u) << what << " (the bf16 path)";
      continue;
    }
    std::vector<double> want, magnitude;
    product(fp8_quantized_rows(x, c.m, c.k), dense, c.m, c.n, c.k, want, magnitude);
    product(x_bf16, dense, c.m, c.n, c.k, rounded, rounded_magnitude);
    size_t misses = 0;
    double off_quantised = 0.0, off_rounded = 0.0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (!(std::fabs(got[i] - want[i]) <= 5e-4 * magnitude[i] + 1e-6)) ++misses;
      off_quantised += std::fabs(got[i] - want[i]);
      off_rounded += std::fabs(got[i] - rounded[i]);
    }
    EXPECT_EQ(misses, 0u) << what;
    EXPECT_LT(off_quantised * 4, off_rounded) << what << ": the product did not use x's e4m3 codes";
  }
}

// Stacked FP8 gate|up (load_stacked_packed_weight: codes and scale rows concatenated) and FP8 down
// through gated_mlp, and the residual add (matmul_add), as decode steps run them. One and two rows
// (gemv.h's epilogues) against float64 over the same e4m3 values and float32 x; more rows (gate and
// up as two products, x quantised per 128 columns: fp8_gemv up to 16 rows, the swapped kernel up to
// 64, cuBLASLt's FP8 GEMM past that) against the same products run one by one with the activation
// on the host. Parts whose rows end inside a scale
// block, or of other widths, are not stacked.
TEST_F(CudaFp8, StackedGateUpAndResidualAddMatchTheirParts) {
  constexpr int64_t kHidden = 384;
  constexpr int64_t kInter = 256;
  const auto activate = [](GluActivation activation, const std::vector<float>& both, int64_t m) {
    std::vector<float> act(static_cast<size_t>(m * kInter));
    for (int64_t r = 0; r < m; ++r) {
      const float* gate = &both[r * 2 * kInter];
      if (activation == GluActivation::kSilu) {
        kernels::ref::silu_mul(gate, gate + kInter, kInter, &act[r * kInter]);
      } else {
        kernels::ref::gelu_tanh_mul(gate, gate + kInter, kInter, &act[r * kInter]);
      }
    }
    return act;
  };
  {
    const Fp8Weight short_gate = Fp8Weight::random(rng_, 100, kHidden, kBlock, kBlock);
    const Fp8Weight up = Fp8Weight::random(rng_, kInter, kHidden, kBlock, kBlock);
    const Fp8Weight wide_up = Fp8Weight::random(rng_, kInter, 2 * kHidden, kBlock, kBlock);
    auto straddling = backend_->load_stacked_packed_weight({short_gate.view(), up.view()});
    ASSERT_TRUE(straddling.ok());
    EXPECT_FALSE(straddling->has_value()) << "a scale block would straddle gate and up";
    auto ending = backend_->load_stacked_packed_weight({up.view(), short_gate.view()});
    ASSERT_TRUE(ending.ok());
    EXPECT_TRUE(ending->has_value()) << "the last part may end inside a block";
    auto mismatched = backend_->load_stacked_packed_weight({up.view(), wide_up.view()});
    ASSERT_TRUE(mismatched.ok());
    EXPECT_FALSE(mismatched->has_value());
  }
  for (int32_t block_rows : {128, 64}) {
    const Fp8Weight gate = Fp8Weight::random(rng_, kInter, kHidden, block_rows, kBlock);
    const Fp8Weight up = Fp8Weight::random(rng_, kInter, kHidden, block_rows, kBlock);
    const Fp8Weight down = Fp8Weight::random(rng_, kHidden, kInter, block_rows, kBlock);
    auto stacked = backend_->load_stacked_packed_weight({gate.view(), up.view()});
    auto d_down = backend_->load_packed_weight(down.view());
    ASSERT_TRUE(stacked.ok() && d_down.ok());
    ASSERT_TRUE(stacked->has_value()) << "FP8 parts in whole 128-column blocks stack on CUDA";
    const kernels::WeightView d_gate_up = **stacked;
    ASSERT_EQ(d_gate_up.rows, 2 * kInter);
    std::vector<float> gate_up_values = gate.dequantized();
    const std::vector<float> up_values = up.dequantized();
    gate_up_values.insert(gate_up_values.end(), up_values.begin(), up_values.end());
    const std::vector<float> down_values = down.dequantized();
    for (int64_t m : {1, 2, 3, 9, 33, 70}) {
      for (GluActivation activation : {GluActivation::kSilu, GluActivation::kGeluTanh}) {
        const std::string what = "M = " + std::to_string(m) + ", block rows " + std::to_string(block_rows) +
                                 (activation == GluActivation::kSilu ? ", silu" : ", gelu");
        const std::vector<float> x = random_floats(rng_, static_cast<size_t>(m * kHidden));
        DeviceBuffer dx = upload(*backend_, x);
        DeviceBuffer scratch = backend_->allocate(static_cast<size_t>(2 * m * kInter) * sizeof(float));
        DeviceBuffer dout = backend_->allocate(static_cast<size_t>(m * kHidden) * sizeof(float));
        backend_->gated_mlp(dx.as<float>(), d_gate_up, *d_down, m, activation, scratch.as<float>(), dout.as<float>());
        const std::vector<float> got = download<float>(*backend_, dout, static_cast<size_t>(m * kHidden));

        std::vector<float> act;
        std::vector<double> want, magnitude;
        double tolerance = 0.0;
        if (m <= kernels::cuda::kGemvMaxRows) {
          std::vector<double> both, both_magnitude;
          product(x, gate_up_values, m, 2 * kInter, kHidden, both, both_magnitude);
          act = activate(activation, std::vector<float>(both.begin(), both.end()), m);
          product(act, down_values, m, kHidden, kInter, want, magnitude);
          // The activations' float32 inputs differ from float64's by a few ulps.
          tolerance = 1e-4;
        } else {
          DeviceBuffer both = backend_->allocate(static_cast<size_t>(2 * m * kInter) * sizeof(float));
          backend_->matmul(dx.as<float>(), d_gate_up, kernels::WeightView{}, m, both.as<float>());
          act = activate(activation, download<float>(*backend_, both, static_cast<size_t>(2 * m * kInter)), m);
          DeviceBuffer dact = upload(*backend_, act);
          DeviceBuffer parts = backend_->allocate(static_cast<size_t>(m * kHidden) * sizeof(float));
          backend_->matmul(dact.as<float>(), *d_down, kernels::WeightView{}, m, parts.as<float>());
          const std::vector<float> one_by_one = download<float>(*backend_, parts, static_cast<size_t>(m * kHidden));
          want.assign(one_by_one.begin(), one_by_one.end());
          std::vector<double> unused;
          product(act, down_values, m, kHidden, kInter, unused, magnitude);
          // A host activation an ulp off may move one term's e4m3 code: ~2^-4 of one of 256 terms.
          tolerance = 1e-3;
        }
        size_t misses = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          // A wrong row, block scale, stride or epilogue is off by whole terms (~magnitude / 16).
          if (!(std::fabs(got[i] - want[i]) <= tolerance * magnitude[i] + 1e-6)) ++misses;
        }
        EXPECT_EQ(misses, 0u) << "gated_mlp, " << what;

        if (m > kernels::cuda::kGemvMaxRows) continue;
        const std::vector<float> residual = random_floats(rng_, static_cast<size_t>(m * kHidden));
        DeviceBuffer dresidual = upload(*backend_, residual);
        DeviceBuffer delta = backend_->allocate(static_cast<size_t>(m * kHidden) * sizeof(float));
        DeviceBuffer dact = upload(*backend_, act);
        backend_->matmul_add(dact.as<float>(), *d_down, m, delta.as<float>(), dresidual.as<float>());
        const std::vector<float> added = download<float>(*backend_, dresidual, residual.size());
        misses = 0;
        for (size_t i = 0; i < added.size(); ++i) {
          if (!(std::fabs(added[i] - (residual[i] + want[i])) <= 1e-5 * magnitude[i] + 1e-6)) ++misses;
        }
        EXPECT_EQ(misses, 0u) << "matmul_add, " << what;
      }
    }
  }
}

// The fixtures' 16 x 16 scale blocks are dequantised to float32 at load: the float32 product's numbers.
TEST_F(CudaFp8, OtherScaleBlocksAreDequantisedAtLoad) {
  const Fp8Weight w = Fp8Weight::random(rng_, 48, 80, 16, 16);
  auto loaded = backend_->load_packed_weight(w.view());
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(loaded->dtype, DType::kF32);
  const std::vector<float> x = random_floats(rng_, static_cast<size_t>(3 * w.cols));
  DeviceBuffer dx = upload(*backend_, x);
  DeviceBuffer dy = backend_->allocate(static_cast<size_t>(3 * w.rows) * sizeof(float));
  backend_->matmul(dx.as<float>(), *loaded, kernels::WeightView{}, 3, dy.as<float>());
  const std::vector<float> got = download<float>(*backend_, dy, static_cast<size_t>(3 * w.rows));
  std::vector<double> want, magnitude;
  product(x, w.dequantized(), 3, w.rows, w.cols, want, magnitude);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * magnitude[i] + 1e-6) << i;
}

// The checkpoints the model tests write, every projection read as FP8 in 128 x 128 blocks, the rest
// bf16: Llama-shaped (kDense); Qwen3-MoE-shaped (kMoe: qk norms, 8 experts expert_inter wide, top-2,
// both layers MoE) with only the experts in FP8 (attention and routers bf16), so the experts alone
// differ from the dequantised reference; DeepSeek-V3-shaped (kMla: MLA with q_lora 128, the 128 + 32
// latent, 4 heads of 64 + 32 for q.k and 64 for v, both layers dense MLPs), whose kv_b_proj is
// dequantised at load (head_matmul reads its per-head slices).
enum class Fp8Layout { kDense, kMoe, kMla };

std::string write_fp8_model(const std::string& dir, std::mt19937& rng, Fp8Layout layout, int64_t hidden,
                            int64_t expert_inter) {
  constexpr int64_t kInter = 768, kVocab = 640, kLayers = 2, kHeads = 4, kKvHeads = 2, kHeadDim = 64, kExperts = 8;
  constexpr int64_t kQLora = 128, kLatent = 128, kRope = 32, kNope = 64, kValue = 64;
  const bool moe = layout == Fp8Layout::kMoe;
  std::filesystem::create_directories(dir);
  std::string architecture;
  switch (layout) {
    case Fp8Layout::kDense:
      architecture = R"("architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_key_value_heads": 2,
    "head_dim": 64,)";
      break;
    case Fp8Layout::kMoe:
      architecture = R"("architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "num_experts": 8,
    "num_experts_per_tok": 2, "moe_intermediate_size": )" +
                     std::to_string(expert_inter) + R"(, "norm_topk_prob": true, "decoder_sparse_step": 1,
    "mlp_only_layers": [], "num_key_value_heads": 2, "head_dim": 64,)";
      break;
    case Fp8Layout::kMla:
      architecture = R"("architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
    "num_key_value_heads": 4, "q_lora_rank": 128, "kv_lora_rank": 128, "qk_rope_head_dim": 32,
    "qk_nope_head_dim": 64, "v_head_dim": 64, "first_k_dense_replace": 2, "n_routed_experts": 4,
    "n_shared_experts": 1, "num_experts_per_tok": 2, "moe_intermediate_size": 128, "n_group": 1,
    "topk_group": 1, "topk_method": "noaux_tc", "scoring_func": "sigmoid", "norm_topk_prob": true,
    "routed_scaling_factor": 1.0, "num_nextn_predict_layers": 0,)";
      break;
  }
  std::ofstream(dir + "/config.json") << "{" << architecture << R"(
    "hidden_size": )" << hidden << R"(, "intermediate_size": 768, "num_hidden_layers": 2, "num_attention_heads": 4,
    "vocab_size": 640, "rms_norm_eps": 1e-5, "hidden_act": "silu", "max_position_embeddings": 512,
    "rope_theta": 10000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                            "weight_block_size": [128, 128]}})";
  CheckpointTensors checkpoint;
  const auto add_bf16 = [&](const std::string& name, std::vector<int64_t> shape, float mean, float spread) {
    checkpoint.add_bf16(rng, name, std::move(shape), mean, spread);
  };
  const auto add_fp8 = [&](const std::string& name, int64_t rows, int64_t cols) {
    Fp8Weight w = Fp8Weight::random(rng, rows, cols, kBlock, kBlock);
    for (float& s : w.scales) s *= 0.25f;  // values up to 448 / 4096 / 4: a trained projection's range
    std::vector<uint8_t> scale_bytes(w.scales.size() * sizeof(float));
    std::memcpy(scale_bytes.data(), w.scales.data(), scale_bytes.size());
    checkpoint.add(name, {rows, cols}, DType::kF8E4M3, std::move(w.codes));
    checkpoint.add(name + "_scale_inv", {(rows + kBlock - 1) / kBlock, (cols + kBlock - 1) / kBlock}, DType::kF32,
                   std::move(scale_bytes));
  };
  add_bf16("model.embed_tokens.weight", {kVocab, hidden}, 0.0f, 1.0f);
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add_bf16(p + "input_layernorm.weight", {hidden}, 1.0f, 0.1f);
    add_bf16(p + "post_attention_layernorm.weight", {hidden}, 1.0f, 0.1f);
    const auto add_attention = [&](const std::string& name, int64_t rows, int64_t cols) {
      if (moe) {
        add_bf16(name, {rows, cols}, 0.0f, 1.0f / std::sqrt(static_cast<float>(cols)));
      } else {
        add_fp8(name, rows, cols);
      }
    };
    if (layout == Fp8Layout::kMla) {
      add_fp8(p + "self_attn.q_a_proj.weight", kQLora, hidden);
      add_bf16(p + "self_attn.q_a_layernorm.weight", {kQLora}, 1.0f, 0.1f);
      add_fp8(p + "self_attn.q_b_proj.weight", kHeads * (kNope + kRope), kQLora);
      add_fp8(p + "self_attn.kv_a_proj_with_mqa.weight", kLatent + kRope, hidden);
      add_bf16(p + "self_attn.kv_a_layernorm.weight", {kLatent}, 1.0f, 0.1f);
      add_fp8(p + "self_attn.kv_b_proj.weight", kHeads * (kNope + kValue), kLatent);
      add_fp8(p + "self_attn.o_proj.weight", hidden, kHeads * kValue);
    } else {
      add_attention(p + "self_attn.q_proj.weight", kHeads * kHeadDim, hidden);
      add_attention(p + "self_attn.k_proj.weight", kKvHeads * kHeadDim, hidden);
      add_attention(p + "self_attn.v_proj.weight", kKvHeads * kHeadDim, hidden);
      add_attention(p + "self_attn.o_proj.weight", hidden, kHeads * kHeadDim);
    }
    if (!moe) {
      add_fp8(p + "mlp.gate_proj.weight", kInter, hidden);
      add_fp8(p + "mlp.up_proj.weight", kInter, hidden);
      add_fp8(p + "mlp.down_proj.weight", hidden, kInter);
      continue;
    }
    add_bf16(p + "self_attn.q_norm.weight", {kHeadDim}, 1.0f, 0.1f);
    add_bf16(p + "self_attn.k_norm.weight", {kHeadDim}, 1.0f, 0.1f);
    add_bf16(p + "mlp.gate.weight", {kExperts, hidden}, 0.0f, 0.25f);
    for (int64_t e = 0; e < kExperts; ++e) {
      const std::string expert = p + "mlp.experts." + std::to_string(e) + ".";
      add_fp8(expert + "gate_proj.weight", expert_inter, hidden);
      add_fp8(expert + "up_proj.weight", expert_inter, hidden);
      add_fp8(expert + "down_proj.weight", hidden, expert_inter);
    }
  }
  add_bf16("model.norm.weight", {hidden}, 1.0f, 0.1f);
  add_bf16("lm_head.weight", {kVocab, hidden}, 0.0f, 0.25f);
  checkpoint.write(dir);
  return dir;
}

// Per-position KL of the checkpoint `layout` picks, read as FP8, against the same checkpoint
// dequantised to float32 at load (BackendOptions::packed_weights off), over a prompt_tokens-token
// prefill and 16 decode steps that feed both the reference's greedy token, with top-1 agreement;
// printed under label. The two models' KV cache element types come back too.
struct Fp8Agreement {
  double kl_prefill = 0.0;
  double kl_decode = 0.0;
  double kl_prefill_median = 0.0;
  double kl_prefill_max = 0.0;
  int agree = 0;
  size_t positions = 0;
  DType fp8_cache = DType::kF32;
  DType reference_cache = DType::kF32;
};
Fp8Agreement fp8_against_dequantised(std::mt19937& rng, Fp8Layout layout, int64_t hidden, int64_t expert_inter,
                                     size_t prompt_tokens, const char* label) {
  const std::string dir = write_fp8_model(
      (std::filesystem::temp_directory_path() / ("deepinfer_fp8_model_" + std::to_string(::getpid()))).string(), rng,
      layout, hidden, expert_inter);
  BackendOptions packed_options, dequantised_options;
  dequantised_options.packed_weights = false;
  auto packed_backend = std::move(make_backend("cuda", packed_options).value());
  auto dequantised_backend = std::move(make_backend("cuda", dequantised_options).value());
  auto packed = load_model(dir, *packed_backend, false);
  auto dequantised = load_model(dir, *dequantised_backend, false);
  std::filesystem::remove_all(dir);
  if (!packed.ok()) throw std::runtime_error(packed.error().message);
  if (!dequantised.ok()) throw std::runtime_error(dequantised.error().message);

  std::vector<int32_t> prompt(prompt_tokens);
  std::uniform_int_distribution<int32_t> token(0, 639);
  for (int32_t& t : prompt) t = token(rng);
  const int64_t vocab = 640;
  Generator fp8_run(**packed, 16), reference_run(**dequantised, 16);
  std::vector<std::vector<float>> fp8_logits, reference_logits;
  const auto split = [&](const std::vector<float>& all, std::vector<std::vector<float>>& rows) {
    for (size_t r = 0; r * vocab < all.size(); ++r)
      rows.emplace_back(all.begin() + r * vocab, all.begin() + (r + 1) * vocab);
  };
  split(fp8_run.append(prompt, true).value(), fp8_logits);
  split(reference_run.append(prompt, true).value(), reference_logits);
  for (int step = 0; step < 16; ++step) {
    const std::vector<float>& last = reference_logits.back();
    const auto next = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    split(fp8_run.append({next}, true).value(), fp8_logits);
    split(reference_run.append({next}, true).value(), reference_logits);
  }
  if (fp8_logits.size() != reference_logits.size()) throw std::runtime_error("the two runs gave different row counts");
  Fp8Agreement result;
  result.positions = fp8_logits.size();
  result.fp8_cache = (*packed)->kv_cache_dtype();
  result.reference_cache = (*dequantised)->kv_cache_dtype();
  std::vector<double> prefill_kls;
  for (size_t r = 0; r < fp8_logits.size(); ++r) {
    const std::vector<float>& p = reference_logits[r];
    const std::vector<float>& q = fp8_logits[r];
    const double kl = kl_divergence(p.data(), q.data(), vocab);
    (r < prompt_tokens ? result.kl_prefill : result.kl_decode) += kl;
    if (r < prompt_tokens) prefill_kls.push_back(kl);
    result.agree +=
        std::max_element(p.begin(), p.end()) - p.begin() == std::max_element(q.begin(), q.end()) - q.begin();
  }
  result.kl_prefill /= static_cast<double>(prompt_tokens);
  std::sort(prefill_kls.begin(), prefill_kls.end());
  result.kl_prefill_median = prefill_kls[prefill_kls.size() / 2];
  result.kl_prefill_max = prefill_kls.back();
  result.kl_decode /= static_cast<double>(fp8_logits.size() - prompt_tokens);
  std::printf("%s vs dequantised: mean KL prefill %.3g (median %.3g, largest %.3g), decode %.3g; top-1 %d of %zu\n",
              label, result.kl_prefill, result.kl_prefill_median, result.kl_prefill_max, result.kl_decode, result.agree,
              result.positions);
  return result;
}

// The Llama-shaped model with its projections read as FP8 (q|k|v and gate|up stacked; activations
// quantised to e4m3 per row per 128 columns from 3 rows, as DeepSeek's kernels do: fp8_gemv up to
// 64 rows for these small weights, past that cuBLASLt's FP8 GEMM where K is a multiple of 512;
// float32 at one or two rows). e4m3 activations keep 3 mantissa bits, and the random models follow
// that noise: mean prefill KL on an H200 0.0085 (256 wide, 48 tokens), 0.049 (512 wide, 64 tokens on
// fp8_gemv; 0.036 with the same 64 rows forced onto cuBLASLt) and 0.028 (512 wide, 96 tokens:
// q|k|v and gate|up on cuBLASLt, o and down, K of 2 and 6 blocks, on the bf16 path), top-1 85-95 %;
// the 256-wide model with its weights dequantised to bf16 and x rounded to bf16 instead (cuBLASLt
// forced, which that K does not take) gave 9e-5. Decode steps read float32 x but attend to the
// prefill's keys and values (0.0009-0.017). The bounds sit at about twice the largest of those: a
// wrong scale or a misread block moves the KL by orders of magnitude (the kernels' own tests above
// hold each product to its quantised reference).
TEST_F(CudaFp8, Fp8ModelFollowsItsDequantisedSelf) {
  struct Case {
    int64_t hidden;
    size_t prompt_tokens;
  };
  for (const Case& c : {Case{256, 48}, Case{512, 64}, Case{512, 96}}) {
    const Fp8Agreement a = fp8_against_dequantised(rng_, Fp8Layout::kDense, c.hidden, 0, c.prompt_tokens, "FP8 model");
    const std::string what = "hidden " + std::to_string(c.hidden) + ", " + std::to_string(c.prompt_tokens) + " tokens";
    EXPECT_LT(a.kl_prefill, 0.1) << what;
    EXPECT_LT(a.kl_decode, 0.04) << what;
    EXPECT_GE(a.agree, static_cast<int>(a.positions * 3 / 4)) << what;
  }
}

// The Qwen3-MoE-shaped model with FP8 experts read packed (moe_fp8.cu's streamed tiles at decode and
// for the 80-token prompt, 20 rows per expert on average, so some experts fill a second tile; from
// 24 rows an expert the grouped FP8 GEMM: the 96- and 320-token prompts, x and the activations
// quantised to e4m3 per 128 columns) against the same experts dequantised to float32, everything
// else bf16 on both sides. Experts 192 wide: down's rows are not whole 128-column blocks, so all
// three matrices of each expert are dequantised at load (MoeLayer::load_per_expert), to bf16 where
// the projections stay FP8 (Backend::dequantised_fp8_dtype): that case checks the load and bf16's
// rounding. Measured on an H100: mean prefill KL 0.0017 (80 tokens on the streamed tiles, f16
// activations), 0.027 (96 tokens) and 0.035 (320 tokens) on the grouped GEMM, decode 1e-5 to 1.4e-4,
// top-1 89-99 %; the 192-wide case 9e-4; bounds as for the dense model.
TEST_F(CudaFp8, Fp8MoeModelFollowsItsDequantisedSelf) {
  struct Case {
    int64_t expert_inter;
    size_t prompt_tokens;
  };
  for (const Case& c : {Case{256, 80}, Case{256, 96}, Case{256, 320}, Case{192, 96}}) {
    const Fp8Agreement a =
        fp8_against_dequantised(rng_, Fp8Layout::kMoe, 512, c.expert_inter, c.prompt_tokens, "FP8 MoE model");
    const std::string what =
        std::to_string(c.prompt_tokens) + " prompt tokens, experts " + std::to_string(c.expert_inter) + " wide";
    EXPECT_LT(a.kl_prefill, 0.1) << what;
    EXPECT_LT(a.kl_decode, 0.04) << what;
    EXPECT_GE(a.agree, static_cast<int>(a.positions * 3 / 4)) << what;
  }
}

// The DeepSeek-V3-shaped model, the published checkpoints' layout: its projections read as FP8 and
// kv_b_proj dequantised to bf16 (Backend::dequantised_fp8_dtype), so its latent cache is bf16 and
// MLA runs on the bf16 kernels, as V3's bf16 release does (a float32 kv_b_proj gave a float32
// cache and the CUDA-core MLA kernels: 18x slower decode attention at batch 16 x 4K on an H100);
// against the checkpoint dequantised to float32 (float32 cache) everywhere. Bounds as above.
TEST_F(CudaFp8, Fp8MlaModelKeepsABf16LatentCacheAndFollowsItsDequantisedSelf) {
  for (const size_t prompt_tokens : {48, 96}) {
    const Fp8Agreement a = fp8_against_dequantised(rng_, Fp8Layout::kMla, 256, 0, prompt_tokens, "FP8 MLA model");
    EXPECT_EQ(a.fp8_cache, DType::kBF16);
    EXPECT_EQ(a.reference_cache, DType::kF32);
    const std::string what = std::to_string(prompt_tokens) + " prompt tokens";
    EXPECT_LT(a.kl_prefill, 0.1) << what;
    EXPECT_LT(a.kl_decode, 0.04) << what;
    EXPECT_GE(a.agree, static_cast<int>(a.positions * 3 / 4)) << what;
  }
}

}  // namespace
}  // namespace deepinfer::testing
