// matmul: cpu (GEMV on every ISA this machine has, oneDNN, the dispatching op) against ref, over
// odd shapes and every weight dtype; plus the GEMV's batch and thread-count invariance and the
// grouped products (matmul_group) against one matmul each.
#include <omp.h>

#include <cstring>
#include <thread>
#include <tuple>

#include "kernel_test_util.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/onednn_matmul.h"

namespace deepinfer::kernels {
namespace {

using testing::TestWeight;

// sum_k |x[m, k] w[n, k]|: the scale of y[m, n]'s rounding error.
std::vector<double> dot_magnitudes(const std::vector<float>& x, const std::vector<float>& w, int64_t rows,
                                   int64_t n_out, int64_t k_in) {
  std::vector<double> magnitude(static_cast<size_t>(rows * n_out));
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t n = 0; n < n_out; ++n) {
      double sum = 0.0;
      for (int64_t k = 0; k < k_in; ++k) sum += std::fabs(static_cast<double>(x[m * k_in + k]) * w[n * k_in + k]);
      magnitude[static_cast<size_t>(m * n_out + n)] = sum;
    }
  }
  return magnitude;
}

std::vector<double> dot_tolerances(const std::vector<double>& magnitudes, int64_t k_in) {
  std::vector<double> tolerance(magnitudes.size());
  for (size_t i = 0; i < magnitudes.size(); ++i) tolerance[i] = testing::dot_tolerance(k_in, magnitudes[i]);
  return tolerance;
}

std::vector<cpu::Isa> supported_isas() {
  std::vector<cpu::Isa> isas{cpu::Isa::kPortable};
  if (cpu::best_isa() != cpu::Isa::kPortable) isas.push_back(cpu::Isa::kAvx2);
  if (cpu::best_isa() == cpu::Isa::kAvx512) isas.push_back(cpu::Isa::kAvx512);
  return isas;
}

const DType kWeightTypes[] = {DType::kF32, DType::kBF16, DType::kF16};
const int64_t kInnerSizes[] = {1, 3, 17, 63, 131, 4097};
const int64_t kOutSizes[] = {1, 5, 33, 67};

std::string shape_name(DType dtype, int64_t rows, int64_t n_out, int64_t k_in) {
  return std::string(dtype_name(dtype)) + " [" + std::to_string(rows) + ", " + std::to_string(k_in) + "] x [" +
         std::to_string(n_out) + ", " + std::to_string(k_in) + "]^T";
}

TEST(Gemv, MatchesRefOnEveryIsaDtypeAndShape) {
  for (DType dtype : kWeightTypes) {
    for (int64_t k_in : kInnerSizes) {
      for (int64_t n_out : kOutSizes) {
        const TestWeight w(dtype, n_out, k_in, 11);
        for (int64_t rows : {1, 2, 5, 9}) {
          const std::vector<float> x = testing::random_floats(static_cast<size_t>(rows * k_in), 12);
          std::vector<float> expected(static_cast<size_t>(rows * n_out));
          ref::matmul(x.data(), w.view(), WeightView{}, rows, expected.data());
          const auto tolerance = dot_tolerances(dot_magnitudes(x, w.values(), rows, n_out, k_in), k_in);
          for (cpu::Isa isa : supported_isas()) {
            std::vector<float> actual(expected.size());
            cpu::gemv(x.data(), w.view(), rows, actual.data(), isa);
            testing::expect_within(
                actual, expected, tolerance,
                std::string("gemv ") + cpu::isa_name(isa) + " " + shape_name(dtype, rows, n_out, k_in));
          }
        }
      }
    }
  }
}

TEST(Gemv, RowResultsIndependentOfBatchAndThreads) {
  const int64_t n_out = 1031;  // large enough to be split across threads
  const int64_t k_in = 257;
  const int64_t rows = 7;
  for (DType dtype : kWeightTypes) {
    const TestWeight w(dtype, n_out, k_in, 21);
    const std::vector<float> x = testing::random_floats(static_cast<size_t>(rows * k_in), 22);
    for (cpu::Isa isa : supported_isas()) {
      std::vector<float> batched(static_cast<size_t>(rows * n_out));
      cpu::gemv(x.data(), w.view(), rows, batched.data(), isa);
      const int saved_threads = omp_get_max_threads();
      omp_set_num_threads(1);
      for (int64_t m = 0; m < rows; ++m) {
        std::vector<float> alone(static_cast<size_t>(n_out));
        cpu::gemv(x.data() + m * k_in, w.view(), 1, alone.data(), isa);
        EXPECT_EQ(0, std::memcmp(alone.data(), batched.data() + m * n_out, alone.size() * sizeof(float)))
            << cpu::isa_name(isa) << " " << dtype_name(dtype) << " row " << m;
      }
      omp_set_num_threads(saved_threads);
    }
  }
}

TEST(OnednnMatmul, MatchesRefOnEveryDtypeAndShape) {
  for (DType dtype : kWeightTypes) {
    for (int64_t k_in : kInnerSizes) {
      for (int64_t n_out : kOutSizes) {
        const TestWeight w(dtype, n_out, k_in, 31);
        for (int64_t rows : {1, 5, 33, 128}) {
          const std::vector<float> x = testing::random_floats(static_cast<size_t>(rows * k_in), 32);
          // The bf16 path multiplies bf16-rounded activations: the oracle gets the same inputs, so
          // only fp32 accumulation error remains and the tolerance stays tight.
          const std::vector<float> x_ref = dtype == DType::kBF16 ? testing::round_to_bf16(x) : x;
          std::vector<float> expected(static_cast<size_t>(rows * n_out));
          ref::matmul(x_ref.data(), w.view(), WeightView{}, rows, expected.data());
          std::vector<float> actual(expected.size());
          cpu::onednn_matmul(x.data(), w.view(), rows, actual.data());
          const auto tolerance = dot_tolerances(dot_magnitudes(x_ref, w.values(), rows, n_out, k_in), k_in);
          testing::expect_within(actual, expected, tolerance, "onednn " + shape_name(dtype, rows, n_out, k_in));
        }
      }
    }
  }
}

TEST(OnednnMatmul, LargeBatchSpansSeveralChunksAndSlabs) {
  // 1100 rows = two full 512-row chunks and a padded 76-row one; N = 3000 F16 rows span several
  // conversion slabs when K = 700 (1 Mi floats / 700 -> 1488-row slabs, clamped to 1024).
  const int64_t rows = 1100;
  const int64_t n_out = 3000;
  const int64_t k_in = 700;
  for (DType dtype : kWeightTypes) {
    const TestWeight w(dtype, n_out, k_in, 41);
    const std::vector<float> x = testing::random_floats(static_cast<size_t>(rows * k_in), 42);
    const std::vector<float> x_ref = dtype == DType::kBF16 ? testing::round_to_bf16(x) : x;
    std::vector<float> actual(static_cast<size_t>(rows * n_out));
    cpu::onednn_matmul(x.data(), w.view(), rows, actual.data());
    // Check a sample of rows (the full reference would dominate the suite's run time).
    for (int64_t m : {0, 511, 512, 1023, 1024, 1099}) {
      std::vector<float> expected(static_cast<size_t>(n_out));
      ref::matmul(x_ref.data() + m * k_in, w.view(), WeightView{}, 1, expected.data());
      const std::vector<float> x_row(x_ref.begin() + m * k_in, x_ref.begin() + (m + 1) * k_in);
      const auto tolerance = dot_tolerances(dot_magnitudes(x_row, w.values(), 1, n_out, k_in), k_in);
      const std::vector<float> got(actual.begin() + m * n_out, actual.begin() + (m + 1) * n_out);
      testing::expect_within(got, expected, tolerance, std::string(dtype_name(dtype)) + " row " + std::to_string(m));
    }
  }
}

TEST(OnednnMatmul, ConcurrentCallersGetTheirOwnResults) {
  // Two threads share the cached primitive (same shapes); each must use its own scratch, or one
  // caller's rounded activations would leak into the other's product.
  const int64_t rows = 40, n_out = 96, k_in = 200;
  const TestWeight w(DType::kBF16, n_out, k_in, 61);
  std::vector<std::vector<float>> inputs, actual;
  for (uint32_t i = 0; i < 2; ++i) {
    inputs.push_back(testing::random_floats(static_cast<size_t>(rows * k_in), 62 + i));
    actual.emplace_back(static_cast<size_t>(rows * n_out));
  }
  std::vector<std::thread> threads;
  for (size_t i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      for (int repeat = 0; repeat < 20; ++repeat)
        cpu::onednn_matmul(inputs[i].data(), w.view(), rows, actual[i].data());
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < 2; ++i) {
    const std::vector<float> x_ref = testing::round_to_bf16(inputs[i]);
    std::vector<float> expected(actual[i].size());
    ref::matmul(x_ref.data(), w.view(), WeightView{}, rows, expected.data());
    const auto tolerance = dot_tolerances(dot_magnitudes(x_ref, w.values(), rows, n_out, k_in), k_in);
    testing::expect_within(actual[i], expected, tolerance, "caller " + std::to_string(i));
  }
}

TEST(Matmul, CpuMatchesRefWithBias) {
  for (DType dtype : kWeightTypes) {
    for (int64_t k_in : {3, 131, 4097}) {
      for (int64_t n_out : {5, 67}) {
        const TestWeight w(dtype, n_out, k_in, 51);
        const TestWeight bias(dtype, 1, n_out, 52);
        for (int64_t rows : {1, 2, 5, 33, 128}) {
          const std::vector<float> x = testing::random_floats(static_cast<size_t>(rows * k_in), 53);
          std::vector<float> actual(static_cast<size_t>(rows * n_out));
          cpu::matmul(x.data(), w.view(), bias.view(), rows, actual.data());
          // Past the GEMV's row limit BF16 weights go through oneDNN with bf16-rounded activations.
          const bool rounded = dtype == DType::kBF16 && rows > cpu::gemv_max_rows(dtype);
          const std::vector<float> x_ref = rounded ? testing::round_to_bf16(x) : x;
          std::vector<float> expected(actual.size());
          ref::matmul(x_ref.data(), w.view(), bias.view(), rows, expected.data());
          std::vector<double> tolerance = dot_tolerances(dot_magnitudes(x_ref, w.values(), rows, n_out, k_in), k_in);
          // The bias is added to the rounded fp32 product: one more rounding.
          for (size_t i = 0; i < tolerance.size(); ++i) tolerance[i] += std::fabs(expected[i]) * testing::kEpsF32;
          testing::expect_within(actual, expected, tolerance, "matmul+bias " + shape_name(dtype, rows, n_out, k_in));
        }
      }
    }
  }
}

TEST(MatmulGroup, EachOutputBitForBitAsMatmulAloneAtAnyThreadCount) {
  // q/k/v-like weights of one width: odd row counts (partial tiles), one with a bias, large enough
  // (> 256 KiB in all) that the group runs in parallel and is cut into several chunks.
  const int64_t k_in = 771;
  const int64_t n_outs[] = {517, 130, 130};
  for (DType dtype : kWeightTypes) {
    std::vector<TestWeight> weights;
    for (size_t i = 0; i < 3; ++i) weights.emplace_back(dtype, n_outs[i], k_in, 71 + static_cast<uint32_t>(i));
    const TestWeight bias(dtype, 1, n_outs[1], 75);
    for (int64_t rows : {int64_t{1}, int64_t{3}, cpu::gemv_max_rows(dtype)}) {
      const std::vector<float> x = testing::random_floats(static_cast<size_t>(rows * k_in), 76);
      std::vector<std::vector<float>> alone(3);
      for (size_t i = 0; i < 3; ++i) {
        alone[i].resize(static_cast<size_t>(rows * n_outs[i]));
        const WeightView b = i == 1 ? bias.view() : WeightView{};
        cpu::matmul(x.data(), weights[i].view(), b, rows, alone[i].data());
      }
      const int saved_threads = omp_get_max_threads();
      for (int threads : {1, 2, 5}) {
        omp_set_num_threads(threads);
        std::vector<std::vector<float>> grouped(3);
        std::vector<cpu::MatmulTarget> targets;
        for (size_t i = 0; i < 3; ++i) {
          grouped[i].assign(alone[i].size(), -1.0f);
          targets.push_back({weights[i].view(), i == 1 ? bias.view() : WeightView{}, grouped[i].data()});
        }
        ASSERT_TRUE(cpu::can_matmul_group(targets.data(), 3, rows));
        cpu::matmul_group(x.data(), rows, targets.data(), 3);
        for (size_t i = 0; i < 3; ++i) {
          EXPECT_EQ(0, std::memcmp(alone[i].data(), grouped[i].data(), alone[i].size() * sizeof(float)))
              << dtype_name(dtype) << " rows " << rows << " output " << i << " threads " << threads;
        }
      }
      omp_set_num_threads(saved_threads);
    }
  }
}

TEST(MatmulGroup, RefusesWhatTheGemvDoesNotTake) {
  const TestWeight a(DType::kBF16, 8, 64, 81), b(DType::kBF16, 8, 65, 82);
  std::vector<float> y(1024);
  const cpu::MatmulTarget mixed_widths[] = {{a.view(), WeightView{}, y.data()}, {b.view(), WeightView{}, y.data()}};
  EXPECT_FALSE(cpu::can_matmul_group(mixed_widths, 2, 1));
  const cpu::MatmulTarget one[] = {{a.view(), WeightView{}, y.data()}};
  EXPECT_TRUE(cpu::can_matmul_group(one, 1, cpu::gemv_max_rows(DType::kBF16)));
  EXPECT_FALSE(cpu::can_matmul_group(one, 1, cpu::gemv_max_rows(DType::kBF16) + 1));  // oneDNN's rows
  EXPECT_FALSE(cpu::can_matmul_group(one, 0, 1));
}

}  // namespace
}  // namespace deepinfer::kernels
