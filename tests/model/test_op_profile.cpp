// OpProfile (runtime/cpu/op_profile.h): the CPU backend's ops land in the profile only while it is
// on, matmuls under their shape with the weight bytes they read; and Backend::matmul_group gives
// each output the bits a matmul of its own gives, on the CPU backend (one parallel region) and the
// reference backend (the default, one matmul each).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "runtime/backend.h"
#include "runtime/cpu/op_profile.h"

namespace deepinfer {
namespace {

const OpProfile::Entry* find_entry(const std::vector<OpProfile::Entry>& entries, const std::string& op) {
  for (const OpProfile::Entry& e : entries) {
    if (e.op == op) return &e;
  }
  return nullptr;
}

TEST(OpProfile, RecordsCpuOpsOnlyWhileEnabled) {
  auto backend = make_backend("cpu");
  ASSERT_TRUE(backend.ok());
  const std::vector<float> w_data(5 * 3, 0.5f), x(3, 1.0f), norm_weight(3, 1.0f);
  const kernels::WeightView w{w_data.data(), DType::kF32, 5, 3};
  const kernels::WeightView norm{norm_weight.data(), DType::kF32, 1, 3};
  std::vector<float> y(5), normed(3);
  OpProfile& profile = OpProfile::global();
  const bool was_enabled = profile.enabled();
  profile.reset();
  profile.set_enabled(false);
  (*backend)->matmul(x.data(), w, kernels::WeightView{}, 1, y.data());
  EXPECT_TRUE(profile.entries().empty());

  profile.set_enabled(true);
  (*backend)->matmul(x.data(), w, kernels::WeightView{}, 1, y.data());
  (*backend)->matmul(x.data(), w, kernels::WeightView{}, 1, y.data());
  (*backend)->rms_norm(x.data(), norm, 0.0f, 1, 3, 1e-6f, normed.data());
  profile.set_enabled(was_enabled);
  const std::vector<OpProfile::Entry> entries = profile.entries();
  const OpProfile::Entry* matmul = find_entry(entries, "matmul m=1 n=5 k=3 F32");
  ASSERT_NE(matmul, nullptr);
  EXPECT_EQ(matmul->num_calls, 2);
  EXPECT_EQ(matmul->bytes, 2 * 5 * 3 * 4);
  const OpProfile::Entry* rms = find_entry(entries, "rms_norm");
  ASSERT_NE(rms, nullptr);
  EXPECT_EQ(rms->num_calls, 1);
  const std::string report = profile.report(2, 1.0);
  EXPECT_NE(report.find("matmul m=1 n=5 k=3 F32"), std::string::npos);
  EXPECT_NE(report.find("outside the ops"), std::string::npos);
  profile.reset();
  EXPECT_TRUE(profile.entries().empty());
}

TEST(MatmulGroup, EveryBackendGivesEachOutputItsOwnMatmulBits) {
  const int64_t k = 300, rows = 3;
  const int64_t n_outs[3] = {700, 130, 131};
  std::vector<std::vector<uint16_t>> weights(3);
  std::vector<float> x(static_cast<size_t>(rows * k)), bias(static_cast<size_t>(n_outs[1]));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = static_cast<float>(i % 7) * 0.25f;
  for (size_t o = 0; o < 3; ++o) {
    weights[o].resize(static_cast<size_t>(n_outs[o] * k));
    for (size_t i = 0; i < weights[o].size(); ++i) {
      weights[o][i] = f32_to_bf16(static_cast<float>((i * 13 + o * 7) % 97) / 48.0f - 1.0f);
    }
  }
  const auto view = [&](size_t o) { return kernels::WeightView{weights[o].data(), DType::kBF16, n_outs[o], k}; };
  const kernels::WeightView bias_view{bias.data(), DType::kF32, 1, n_outs[1]};
  for (const char* name : {"cpu", "ref"}) {
    auto backend = make_backend(name);
    ASSERT_TRUE(backend.ok());
    std::vector<std::vector<float>> alone(3), grouped(3);
    for (size_t o = 0; o < 3; ++o) {
      alone[o].resize(static_cast<size_t>(rows * n_outs[o]));
      grouped[o].assign(alone[o].size(), -7.0f);
      (*backend)->matmul(x.data(), view(o), o == 1 ? bias_view : kernels::WeightView{}, rows, alone[o].data());
    }
    (*backend)->matmul_group(x.data(), rows,
                             {{view(0), kernels::WeightView{}, grouped[0].data()},
                              {view(1), bias_view, grouped[1].data()},
                              {view(2), kernels::WeightView{}, grouped[2].data()}});
    for (size_t o = 0; o < 3; ++o) {
      EXPECT_EQ(0, std::memcmp(alone[o].data(), grouped[o].data(), alone[o].size() * sizeof(float)))
          << name << " output " << o;
    }
  }
}

}  // namespace
}  // namespace deepinfer
