// Block-quantised weights (FP8 e4m3 with block scales, MXFP4) read packed by the CPU kernels, against
// the same weights dequantised to float32 first (ref::dequantize_weight_row): the GEMV on every ISA
// bit for bit, the dispatching matmul (GEMV and the dequantising slab GEMM), the batch-invariant
// matmul and the expert kernel; the reference matmul within the dot-product tolerance. Random data,
// odd shapes: rows not a multiple of the tile, K a multiple of the format's block or not (FP8).
#include <cstring>
#include <random>

#include "kernel_test_util.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/matmul_invariant.h"
#include "kernels/cpu/moe.h"
#include "kernels/ref/dequantize.h"

namespace deepinfer::kernels {
namespace {

// A random packed weight [rows, cols] and its float32 dequantisation.
class PackedWeight {
 public:
  // FP8 with block_rows x block_cols scales in [2^-10, 2^-2]; codes avoid the NaN code S.1111.111.
  static PackedWeight fp8(int64_t rows, int64_t cols, int32_t block_rows, int32_t block_cols, uint32_t seed) {
    PackedWeight w(DType::kF8E4M3, rows, cols, block_rows, block_cols);
    std::mt19937 rng(seed);
    w.values_.resize(static_cast<size_t>(rows * cols));
    for (uint8_t& code : w.values_) {
      do code = static_cast<uint8_t>(rng());
      while ((code & 0x7fu) == 0x7fu);
    }
    const int64_t scale_count = (rows + block_rows - 1) / block_rows * ((cols + block_cols - 1) / block_cols);
    w.fp8_scales_ = testing::random_floats(static_cast<size_t>(scale_count), seed + 1, 1.0f / 1024, 0.25f);
    w.dequantize();
    return w;
  }
  // MXFP4 with e8m0 scales 2^-6 .. 2^3 (cols a multiple of 32).
  static PackedWeight mxfp4(int64_t rows, int64_t cols, uint32_t seed) {
    PackedWeight w(DType::kMxfp4, rows, cols, 1, static_cast<int32_t>(kMxfp4Block));
    std::mt19937 rng(seed);
    w.values_.resize(static_cast<size_t>(rows * cols / 2));
    for (uint8_t& pair : w.values_) pair = static_cast<uint8_t>(rng());
    w.mx_scales_.resize(static_cast<size_t>(rows * cols / kMxfp4Block));
    for (uint8_t& scale : w.mx_scales_) scale = static_cast<uint8_t>(121 + rng() % 10);
    w.dequantize();
    return w;
  }

  WeightView view() const {
    WeightView view{values_.data(), dtype_, rows_, cols_};
    view.scales = dtype_ == DType::kF8E4M3 ? static_cast<const void*>(fp8_scales_.data()) : mx_scales_.data();
    view.scale_block_rows = block_rows_;
    view.scale_block_cols = block_cols_;
    return view;
  }
  // The float32 weight [rows, cols] the packed one stands for, and a view of it.
  const std::vector<float>& values() const { return dequantized_; }
  WeightView f32_view() const { return WeightView{dequantized_.data(), DType::kF32, rows_, cols_}; }

 private:
  PackedWeight(DType dtype, int64_t rows, int64_t cols, int32_t block_rows, int32_t block_cols)
      : dtype_(dtype), rows_(rows), cols_(cols), block_rows_(block_rows), block_cols_(block_cols) {}
  void dequantize() {
    dequantized_.resize(static_cast<size_t>(rows_ * cols_));
    for (int64_t r = 0; r < rows_; ++r) ref::dequantize_weight_row(view(), r, dequantized_.data() + r * cols_);
  }

  DType dtype_;
  int64_t rows_, cols_;
  int32_t block_rows_, block_cols_;
  std::vector<uint8_t> values_;
  std::vector<float> fp8_scales_;
  std::vector<uint8_t> mx_scales_;
  std::vector<float> dequantized_;
};

std::vector<cpu::Isa> supported_isas() {
  std::vector<cpu::Isa> isas{cpu::Isa::kPortable};
  if (cpu::best_isa() != cpu::Isa::kPortable) isas.push_back(cpu::Isa::kAvx2);
  if (cpu::best_isa() == cpu::Isa::kAvx512) isas.push_back(cpu::Isa::kAvx512);
  return isas;
}

// The packed weights of the tests: FP8 in DeepSeek-V3's 128 x 128 blocks and the fixtures' 16 x 16
// (K a multiple of the block, or with a partial last block, or not a multiple of 16), MXFP4 with K
// a multiple of 32 (GPT-OSS's hidden size 2880 among them). Row counts are odd.
std::vector<PackedWeight> test_weights() {
  std::vector<PackedWeight> weights;
  uint32_t seed = 100;
  for (int64_t rows : {1, 7, 133}) {
    for (int64_t cols : {16, 131, 272, 1024}) weights.push_back(PackedWeight::fp8(rows, cols, 128, 128, ++seed));
    for (int64_t cols : {48, 77}) weights.push_back(PackedWeight::fp8(rows, cols, 16, 16, ++seed));
    for (int64_t cols : {32, 96, 2880}) weights.push_back(PackedWeight::mxfp4(rows, cols, ++seed));
  }
  return weights;
}

// Per-output tolerance of y = x w^T: dot_tolerance over the terms' absolute sum.
std::vector<double> dot_tolerances(const std::vector<float>& x, const PackedWeight& w, int64_t num_rows) {
  const WeightView view = w.view();
  std::vector<double> tolerance(static_cast<size_t>(num_rows * view.rows));
  for (int64_t m = 0; m < num_rows; ++m) {
    for (int64_t n = 0; n < view.rows; ++n) {
      double magnitude = 0.0;
      for (int64_t k = 0; k < view.cols; ++k) {
        magnitude += std::fabs(double{x[static_cast<size_t>(m * view.cols + k)]} *
                               w.values()[static_cast<size_t>(n * view.cols + k)]);
      }
      tolerance[static_cast<size_t>(m * view.rows + n)] = testing::dot_tolerance(view.cols, magnitude);
    }
  }
  return tolerance;
}

std::string describe(const WeightView& w, int64_t num_rows) {
  return std::string(dtype_name(w.dtype)) + " [" + std::to_string(w.rows) + ", " + std::to_string(w.cols) +
         "] blocks " + std::to_string(w.scale_block_rows) + "x" + std::to_string(w.scale_block_cols) + ", " +
         std::to_string(num_rows) + " activation rows";
}

void expect_same_bits(const std::vector<float>& actual, const std::vector<float>& expected, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  EXPECT_EQ(std::memcmp(actual.data(), expected.data(), actual.size() * sizeof(float)), 0) << what;
}

TEST(PackedGemv, EqualsF32GemvOfTheDequantisedWeightOnEveryIsa) {
  for (const PackedWeight& w : test_weights()) {
    for (int64_t num_rows : {1, 3, 6}) {
      const std::vector<float> x = testing::random_floats(static_cast<size_t>(num_rows * w.view().cols), 7);
      const auto y_size = static_cast<size_t>(num_rows * w.view().rows);
      for (cpu::Isa isa : supported_isas()) {
        std::vector<float> packed(y_size), dequantized(y_size);
        cpu::gemv(x.data(), w.view(), num_rows, packed.data(), isa);
        cpu::gemv(x.data(), w.f32_view(), num_rows, dequantized.data(), isa);
        expect_same_bits(packed, dequantized,
                         std::string("gemv ") + cpu::isa_name(isa) + " " + describe(w.view(), num_rows));
      }
    }
  }
}

TEST(PackedMatmul, RefWithinDotToleranceOfDequantisedProduct) {
  for (const PackedWeight& w : test_weights()) {
    const WeightView view = w.view();
    const int64_t num_rows = 2;
    const std::vector<float> x = testing::random_floats(static_cast<size_t>(num_rows * view.cols), 8);
    std::vector<float> reference(static_cast<size_t>(num_rows * view.rows)), packed(reference.size());
    ref::matmul(x.data(), w.f32_view(), WeightView{}, num_rows, reference.data());
    ref::matmul(x.data(), view, WeightView{}, num_rows, packed.data());
    // The same float64 sums of the same float32 products: equal.
    expect_same_bits(packed, reference, "ref::matmul " + describe(view, num_rows));
    std::vector<float> cpu_y(reference.size());
    cpu::matmul(x.data(), view, WeightView{}, num_rows, cpu_y.data());
    testing::expect_within(cpu_y, reference, dot_tolerances(x, w, num_rows),
                           "cpu::matmul vs ref " + describe(view, num_rows));
  }
}

// Past gemv_max_rows the packed weight is dequantised a slab of rows at a time into oneDNN's f32
// GEMM, the dequantised one multiplied whole: the same products, in oneDNN's order for each.
TEST(PackedMatmul, PromptSizedProductsMatchTheDequantisedWeight) {
  for (const PackedWeight& w : test_weights()) {
    const WeightView view = w.view();
    const int64_t num_rows = cpu::gemv_max_rows(view.dtype) + 9;
    const std::vector<float> x = testing::random_floats(static_cast<size_t>(num_rows * view.cols), 9);
    std::vector<float> packed(static_cast<size_t>(num_rows * view.rows)), dequantized(packed.size());
    const WeightView bias_view;
    cpu::matmul(x.data(), view, bias_view, num_rows, packed.data());
    cpu::matmul(x.data(), w.f32_view(), bias_view, num_rows, dequantized.data());
    // The same float32 operands, summed in another order where the two take different kernels (MXFP4
    // past 16 rows: the slab GEMM; its F32 dequantisation: the GEMV up to 32).
    testing::expect_within(packed, dequantized, dot_tolerances(x, w, num_rows), "matmul " + describe(view, num_rows));

    std::vector<float> invariant(packed.size()), invariant_f32(packed.size());
    cpu::matmul_invariant(x.data(), view, bias_view, num_rows, invariant.data());
    cpu::matmul_invariant(x.data(), w.f32_view(), bias_view, num_rows, invariant_f32.data());
    expect_same_bits(invariant, invariant_f32, "matmul_invariant " + describe(view, num_rows));
  }
}

TEST(PackedMatmul, GroupedProductsEqualSeparateOnes) {
  const PackedWeight q = PackedWeight::fp8(133, 272, 128, 128, 1);
  const PackedWeight k = PackedWeight::fp8(7, 272, 128, 128, 2);
  const int64_t num_rows = 3;
  const std::vector<float> x = testing::random_floats(static_cast<size_t>(num_rows * 272), 3);
  std::vector<float> q_alone(static_cast<size_t>(num_rows * 133)), k_alone(static_cast<size_t>(num_rows * 7));
  cpu::matmul(x.data(), q.view(), WeightView{}, num_rows, q_alone.data());
  cpu::matmul(x.data(), k.view(), WeightView{}, num_rows, k_alone.data());
  std::vector<float> q_grouped(q_alone.size()), k_grouped(k_alone.size());
  const cpu::MatmulTarget targets[] = {{q.view(), WeightView{}, q_grouped.data()},
                                       {k.view(), WeightView{}, k_grouped.data()}};
  ASSERT_TRUE(cpu::can_matmul_group(targets, 2, num_rows));
  cpu::matmul_group(x.data(), num_rows, targets, 2);
  expect_same_bits(q_grouped, q_alone, "q");
  expect_same_bits(k_grouped, k_alone, "k");
}

// GPT-OSS's experts as the loader keeps them on the CPU (MXFP4, bf16 biases, clamped SwiGLU)
// against the same experts dequantised to bf16 at load: the same bits (the values are exact in
// bf16, and both GEMVs multiply them in the same order).
TEST(PackedMoeExperts, Mxfp4ExpertsEqualTheirBf16Dequantisation) {
  const int32_t num_experts = 5;
  const int64_t hidden = 96;
  const int64_t inter = 64;
  std::vector<PackedWeight> weights;
  std::vector<std::vector<uint16_t>> bf16_bits;
  std::vector<WeightView> gate, up, down, gate_bf16, up_bf16, down_bf16, gate_bias, up_bias, down_bias;
  const std::vector<float> biases = testing::round_to_bf16(testing::random_floats(3 * num_experts * hidden, 4));
  std::vector<uint16_t> bias_bits(biases.size());
  for (size_t i = 0; i < biases.size(); ++i) bias_bits[i] = f32_to_bf16(biases[i]);
  for (int32_t e = 0; e < num_experts; ++e) {
    weights.push_back(PackedWeight::mxfp4(inter, hidden, 20 + 3 * e));
    weights.push_back(PackedWeight::mxfp4(inter, hidden, 21 + 3 * e));
    weights.push_back(PackedWeight::mxfp4(hidden, inter, 22 + 3 * e));
  }
  for (const PackedWeight& w : weights) {
    std::vector<uint16_t>& bits = bf16_bits.emplace_back(w.values().size());
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = f32_to_bf16(w.values()[i]);
  }
  for (int32_t e = 0; e < num_experts; ++e) {
    for (int p = 0; p < 3; ++p) {
      const size_t i = static_cast<size_t>(3 * e + p);
      const WeightView packed = weights[i].view();
      const WeightView bf16{bf16_bits[i].data(), DType::kBF16, packed.rows, packed.cols};
      const WeightView bias{bias_bits.data() + i * hidden, DType::kBF16, 1, packed.rows};
      (p == 0 ? gate : p == 1 ? up : down).push_back(packed);
      (p == 0 ? gate_bf16 : p == 1 ? up_bf16 : down_bf16).push_back(bf16);
      (p == 0 ? gate_bias : p == 1 ? up_bias : down_bias).push_back(bias);
    }
  }
  MoeExperts experts;
  experts.num_experts = num_experts;
  experts.top_k = 2;
  experts.hidden = hidden;
  experts.intermediate = inter;
  experts.gate_bias = gate_bias.data();
  experts.up_bias = up_bias.data();
  experts.down_bias = down_bias.data();
  experts.activation = ExpertActivation::kClampedSwiglu;
  const int64_t num_tokens = 6;
  const std::vector<float> x = testing::random_floats(static_cast<size_t>(num_tokens * hidden), 5, -3.0f, 3.0f);
  const std::vector<int32_t> ids = {0, 3, 4, 1, 3, 0, 2, 4, 1, 2, 4, 3};
  const std::vector<float> routing_weights = testing::random_floats(ids.size(), 6, 0.1f, 1.0f);
  auto run = [&](const std::vector<WeightView>& g, const std::vector<WeightView>& u, const std::vector<WeightView>& d,
                 bool invariant) {
    MoeExperts view = experts;
    view.gate = g.data();
    view.up = u.data();
    view.down = d.data();
    std::vector<float> workspace(static_cast<size_t>(moe_workspace_floats(num_tokens, view)));
    std::vector<float> out(static_cast<size_t>(num_tokens * hidden));
    (invariant ? cpu::moe_experts_invariant : cpu::moe_experts)(
        x.data(), num_tokens, ids.data(), routing_weights.data(), view, workspace.data(), nullptr, out.data());
    return out;
  };
  for (bool invariant : {false, true}) {
    expect_same_bits(run(gate, up, down, invariant), run(gate_bf16, up_bf16, down_bf16, invariant),
                     invariant ? "moe_experts_invariant" : "moe_experts");
  }
}

TEST(PackedWeightBytes, CountValuesAndScales) {
  const PackedWeight fp8 = PackedWeight::fp8(256, 384, 128, 128, 1);
  EXPECT_EQ(weight_bytes(fp8.view()), 256 * 384 + 2 * 3 * 4);
  const PackedWeight mxfp4 = PackedWeight::mxfp4(10, 64, 2);
  EXPECT_EQ(weight_bytes(mxfp4.view()), 10 * 32 + 10 * 2);
}

}  // namespace
}  // namespace deepinfer::kernels
