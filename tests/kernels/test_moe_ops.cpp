// The mixture-of-experts ops: routing against hand-computed cases (softmax, sigmoid + selection
// bias, grouped top-k by max and by top-two sum, normalisation, scaling), the CPU expert kernel
// against the reference over odd shapes and both activations (empty rows of expert parallelism's
// fixed-size exchange included), the fixed-size dispatch plan by hand, the strided row copy, and the
// row payloads of expert-parallel exchanges.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "kernel_test_util.h"
#include "kernels/cpu/moe.h"
#include "kernels/ops.h"

namespace deepinfer::kernels {
namespace {

using testing::random_floats;
using testing::TestWeight;

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

Routed route(const std::vector<float>& logits, const MoeRouting& routing, const std::vector<float>& bias = {}) {
  const auto num_tokens = static_cast<int64_t>(logits.size()) / routing.num_experts;
  Routed ref_out{std::vector<int32_t>(static_cast<size_t>(num_tokens * routing.top_k)),
                 std::vector<float>(static_cast<size_t>(num_tokens * routing.top_k))};
  Routed cpu_out = ref_out;
  WeightView bias_view;
  if (!bias.empty()) bias_view = WeightView{bias.data(), DType::kF32, 1, static_cast<int64_t>(bias.size())};
  ref::moe_route(logits.data(), bias_view, num_tokens, routing, ref_out.ids.data(), ref_out.weights.data());
  cpu::moe_route(logits.data(), bias_view, num_tokens, routing, cpu_out.ids.data(), cpu_out.weights.data());
  EXPECT_EQ(cpu_out.ids, ref_out.ids);
  EXPECT_EQ(cpu_out.weights, ref_out.weights);
  return ref_out;
}

TEST(MoeRoute, SoftmaxTopKRenormalised) {
  // softmax of [0, ln 2, ln 4, ln 1] = [1, 2, 4, 1] / 8; top-2 = experts 2 (0.5), 1 (0.25).
  const std::vector<float> logits = {0.0f, std::log(2.0f), std::log(4.0f), 0.0f};
  MoeRouting routing;
  routing.num_experts = 4;
  routing.top_k = 2;
  Routed plain = route(logits, routing);
  EXPECT_EQ(plain.ids, (std::vector<int32_t>{2, 1}));
  EXPECT_NEAR(plain.weights[0], 0.5f, 1e-7f);
  EXPECT_NEAR(plain.weights[1], 0.25f, 1e-7f);
  routing.normalize = true;
  routing.scaling = 2.0f;
  Routed normalised = route(logits, routing);
  EXPECT_NEAR(normalised.weights[0], 2.0f * 2.0f / 3.0f, 1e-6f);
  EXPECT_NEAR(normalised.weights[1], 2.0f * 1.0f / 3.0f, 1e-6f);
}

TEST(MoeRoute, SigmoidBiasChoosesButDoesNotWeigh) {
  // sigmoid(0) = 0.5, sigmoid(ln 3) = 0.75. The bias lifts expert 0 above expert 1 for the
  // choice; the weights stay the unbiased sigmoids.
  const std::vector<float> logits = {0.0f, std::log(3.0f), -5.0f};
  MoeRouting routing;
  routing.num_experts = 3;
  routing.top_k = 1;
  routing.scoring = MoeScoring::kSigmoid;
  Routed unbiased = route(logits, routing);
  EXPECT_EQ(unbiased.ids[0], 1);
  Routed biased = route(logits, routing, {0.3f, 0.0f, 0.0f});
  EXPECT_EQ(biased.ids[0], 0);
  EXPECT_NEAR(biased.weights[0], 0.5f, 1e-7f);
}

TEST(MoeRoute, GroupedTopKByMaxAndByTopTwoSum) {
  // Two groups of three experts (sigmoid scores written as probabilities via logit()).
  // Group 0: 0.9, 0.1, 0.1 (max 0.9, top-two sum 1.0); group 1: 0.6, 0.6, 0.6 (max 0.6, sum 1.2).
  const auto logit = [](double p) { return static_cast<float>(std::log(p / (1.0 - p))); };
  const std::vector<float> logits = {logit(0.9), logit(0.1), logit(0.1), logit(0.6), logit(0.6), logit(0.6)};
  MoeRouting routing;
  routing.num_experts = 6;
  routing.top_k = 2;
  routing.scoring = MoeScoring::kSigmoid;
  routing.num_groups = 2;
  routing.top_groups = 1;
  routing.group_score = MoeGroupScore::kMax;
  Routed by_max = route(logits, routing);
  EXPECT_EQ(by_max.ids, (std::vector<int32_t>{0, 1}));  // group 0 only; ties go to the lower id
  routing.group_score = MoeGroupScore::kTopTwoSum;
  Routed by_sum = route(logits, routing);
  EXPECT_EQ(by_sum.ids, (std::vector<int32_t>{3, 4}));
  EXPECT_NEAR(by_sum.weights[0], 0.6f, 1e-6f);
  routing.top_groups = 2;
  Routed both = route(logits, routing);
  EXPECT_EQ(both.ids, (std::vector<int32_t>{0, 3}));
}

void check_experts(ExpertActivation activation, bool biases, int64_t num_tokens, DType dtype) {
  const int32_t num_experts = 5;
  const int32_t top_k = 3;
  const int64_t hidden = 19;
  const int64_t inter = 23;
  std::vector<TestWeight> gate, up, down, gate_b, up_b, down_b;
  for (int32_t e = 0; e < num_experts; ++e) {
    const auto seed = static_cast<uint32_t>(100 + 10 * e);
    gate.emplace_back(dtype, inter, hidden, seed, -0.5f, 0.5f);
    up.emplace_back(dtype, inter, hidden, seed + 1, -0.5f, 0.5f);
    down.emplace_back(dtype, hidden, inter, seed + 2, -0.5f, 0.5f);
    gate_b.emplace_back(DType::kF32, 1, inter, seed + 3);
    up_b.emplace_back(DType::kF32, 1, inter, seed + 4);
    down_b.emplace_back(DType::kF32, 1, hidden, seed + 5);
  }
  const auto views = [](const std::vector<TestWeight>& ws) {
    std::vector<WeightView> out;
    for (const auto& w : ws) out.push_back(w.view());
    return out;
  };
  const auto g = views(gate), u = views(up), d = views(down), gb = views(gate_b), ub = views(up_b), db = views(down_b);
  MoeExperts experts;
  experts.num_experts = num_experts;
  experts.top_k = top_k;
  experts.hidden = hidden;
  experts.intermediate = inter;
  experts.gate = g.data();
  experts.up = u.data();
  experts.down = d.data();
  if (biases) {
    experts.gate_bias = gb.data();
    experts.up_bias = ub.data();
    experts.down_bias = db.data();
  }
  experts.activation = activation;
  experts.swiglu_limit = 1.5f;  // small enough that the clamps bite
  const std::vector<float> x = random_floats(static_cast<size_t>(num_tokens * hidden), 7, -2.0f, 2.0f);
  // Distinct experts per token, skewed so some experts get many tokens and one gets none.
  std::vector<int32_t> ids(static_cast<size_t>(num_tokens * top_k));
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int32_t j = 0; j < top_k; ++j) ids[static_cast<size_t>(t * top_k + j)] = static_cast<int32_t>((t % 2 + j) % 4);
  }
  const std::vector<float> weights = random_floats(ids.size(), 9, 0.1f, 1.0f);
  std::vector<float> workspace(static_cast<size_t>(moe_workspace_floats(num_tokens, experts)));
  std::vector<float> want(static_cast<size_t>(num_tokens * hidden)), got(want.size()), invariant(want.size());
  std::vector<int64_t> ref_counts(num_experts, 0), cpu_counts(num_experts, 0);
  ref::moe_experts(x.data(), num_tokens, ids.data(), weights.data(), experts, workspace.data(), ref_counts.data(),
                   want.data());
  cpu::moe_experts(x.data(), num_tokens, ids.data(), weights.data(), experts, workspace.data(), cpu_counts.data(),
                   got.data());
  cpu::moe_experts_invariant(x.data(), num_tokens, ids.data(), weights.data(), experts, workspace.data(), nullptr,
                             invariant.data());
  EXPECT_EQ(cpu_counts, ref_counts);
  EXPECT_EQ(std::accumulate(ref_counts.begin(), ref_counts.end(), int64_t{0}), num_tokens * top_k);
  EXPECT_EQ(ref_counts[4], 0);
  // Three chained reductions (hidden, then intermediate, then top_k) of values below ~10.
  std::vector<double> tolerance(want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    tolerance[i] = 64.0 * testing::kEpsF32 * static_cast<double>(hidden + inter) * (1.0 + std::fabs(want[i]));
  }
  testing::expect_within(got, want, tolerance, "cpu::moe_experts");
  testing::expect_within(invariant, want, tolerance, "cpu::moe_experts_invariant");

  // Expert parallelism's path: each (token, j) slot's row run alone through its expert (top_k 1,
  // weight 1), in another order, as a rank that owns the expert would, then moe_combine at home:
  // the same bits as the batch-invariant kernels in one call. Rows 0 and the last are empty rows of
  // a fixed-size exchange (expert -1, any values): they come out zero and add nothing.
  const int64_t num_slots = num_tokens * top_k;
  const int64_t num_rows = num_slots + 2;
  std::vector<int32_t> row_of_slot(static_cast<size_t>(num_slots));
  for (int64_t s = 0; s < num_slots; ++s) row_of_slot[static_cast<size_t>(s)] = static_cast<int32_t>(num_slots - s);
  std::vector<float> slot_x = random_floats(static_cast<size_t>(num_rows * hidden), 11, -2.0f, 2.0f);
  std::vector<int32_t> slot_expert(static_cast<size_t>(num_rows), -1);
  for (int64_t s = 0; s < num_slots; ++s) {
    const auto row = static_cast<size_t>(row_of_slot[static_cast<size_t>(s)]);
    std::copy_n(x.begin() + (s / top_k) * hidden, hidden, slot_x.begin() + static_cast<int64_t>(row) * hidden);
    slot_expert[row] = ids[static_cast<size_t>(s)];
  }
  MoeExperts one = experts;
  one.top_k = 1;
  const std::vector<float> ones(static_cast<size_t>(num_rows), 1.0f);
  std::vector<float> slot_workspace(static_cast<size_t>(moe_workspace_floats(num_rows, one)));
  std::vector<float> slot_y(slot_x.size(), NAN), combined(want.size());
  const auto expect_empty_rows_zero = [&](const char* what) {
    for (const int64_t row : {int64_t{0}, num_rows - 1}) {
      for (int64_t i = 0; i < hidden; ++i) {
        ASSERT_EQ(slot_y[static_cast<size_t>(row * hidden + i)], 0.0f) << what << ": empty row " << row;
      }
    }
  };
  std::vector<int64_t> slot_counts(num_experts, 0);
  ref::moe_experts(slot_x.data(), num_rows, slot_expert.data(), ones.data(), one, slot_workspace.data(),
                   slot_counts.data(), slot_y.data());
  EXPECT_EQ(slot_counts, ref_counts) << "ref: empty rows are no expert's";
  expect_empty_rows_zero("ref");
  ref::moe_combine(slot_y.data(), row_of_slot.data(), weights.data(), num_tokens, top_k, hidden, combined.data());
  EXPECT_EQ(combined, want) << "ref: experts run elsewhere, combined at home";
  std::fill(slot_y.begin(), slot_y.end(), NAN);
  std::fill(slot_counts.begin(), slot_counts.end(), 0);
  cpu::moe_experts_invariant(slot_x.data(), num_rows, slot_expert.data(), ones.data(), one, slot_workspace.data(),
                             slot_counts.data(), slot_y.data());
  EXPECT_EQ(slot_counts, ref_counts) << "cpu: empty rows are no expert's";
  expect_empty_rows_zero("cpu");
  cpu::moe_combine(slot_y.data(), row_of_slot.data(), weights.data(), num_tokens, top_k, hidden, combined.data());
  EXPECT_EQ(combined, invariant) << "cpu (batch invariant): experts run elsewhere, combined at home";
  // A slot whose row is -1 (a fixed-size exchange's overflow) adds nothing.
  std::vector<int32_t> without_first = row_of_slot;
  without_first[0] = -1;
  std::vector<float> partial(want.size()), partial_ref(want.size());
  cpu::moe_combine(slot_y.data(), without_first.data(), weights.data(), num_tokens, top_k, hidden, partial.data());
  ref::moe_combine(slot_y.data(), without_first.data(), weights.data(), num_tokens, top_k, hidden, partial_ref.data());
  EXPECT_EQ(partial, partial_ref);
  std::vector<float> dropped = slot_y;
  std::fill_n(dropped.begin() + row_of_slot[0] * hidden, hidden, 0.0f);
  cpu::moe_combine(dropped.data(), row_of_slot.data(), weights.data(), num_tokens, top_k, hidden, combined.data());
  EXPECT_EQ(partial, combined) << "a row of -1 adds what a zero row adds";
}

// BF16 weights up to 16 rows per expert (the GEMV keeps activations in fp32; beyond, oneDNN's
// bf16 GEMM rounds them, covered by the matmul tests); F32 weights also past oneDNN's threshold.
TEST(MoeExperts, CpuMatchesRefSiluGated) {
  for (int64_t n : {1, 2, 7, 16}) check_experts(ExpertActivation::kSiluGated, false, n, DType::kBF16);
  for (int64_t n : {9, 40, 70}) check_experts(ExpertActivation::kSiluGated, false, n, DType::kF32);
}

TEST(MoeExperts, CpuMatchesRefClampedSwigluWithBiases) {
  for (int64_t n : {1, 5, 33}) check_experts(ExpertActivation::kClampedSwiglu, true, n, DType::kF32);
}

TEST(MoeExperts, RefAppliesWeightsAndClampedSwiglu) {
  // One expert, hidden 1, intermediate 1, identity-like weights: out = w * down * act(gate x, up x).
  const float one = 1.0f, two = 2.0f, three = 3.0f;
  const WeightView gate{&two, DType::kF32, 1, 1}, up{&three, DType::kF32, 1, 1}, down{&one, DType::kF32, 1, 1};
  MoeExperts experts;
  experts.num_experts = 1;
  experts.top_k = 1;
  experts.hidden = 1;
  experts.intermediate = 1;
  experts.gate = &gate;
  experts.up = &up;
  experts.down = &down;
  experts.activation = ExpertActivation::kClampedSwiglu;
  experts.swiglu_alpha = 1.702f;
  experts.swiglu_limit = 7.0f;
  const float x = 4.0f;  // gate 8 -> clamped to 7; up 12 -> clamped to 7
  const int32_t id = 0;
  const float weight = 0.5f;
  std::vector<float> workspace(static_cast<size_t>(moe_workspace_floats(1, experts)));
  float out = 0.0f;
  ref::moe_experts(&x, 1, &id, &weight, experts, workspace.data(), nullptr, &out);
  const double want = 0.5 * (7.0 + 1.0) * 7.0 / (1.0 + std::exp(-1.702 * 7.0));
  EXPECT_NEAR(out, want, 1e-5);
}

// Two ranks of 3 slots, experts 0 and 1 with a second copy on rank 1 (slots 4, 5), planned on rank
// 1 (replica turns start at the rank), room 6 rows per rank: by hand.
TEST(MoeDispatch, PlansTheHostsOrderWithRoomPerRank) {
  const std::vector<int32_t> replica_offsets = {0, 2, 4, 5, 6};  // experts 0..3
  const std::vector<int32_t> replica_slots = {0, 4, 1, 5, 2, 3};
  const std::vector<int32_t> ids = {0, 1, 0, 3, 1, 2};  // tokens 0, 1, 2, top 2
  const int64_t hidden = 3;
  const std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  for (const bool on_cpu : {false, true}) {
    std::vector<int32_t> send_slot(12, 99), row_of_slot(6, 99);
    std::vector<int64_t> routed = {10, 0, 0, 0};
    std::vector<float> send_rows(12 * hidden, NAN);
    ExpertDispatch d;
    d.replica_offsets = replica_offsets.data();
    d.replica_slots = replica_slots.data();
    d.num_logical = 4;
    d.slots_per_rank = 3;
    d.world = 2;
    d.rank = 1;
    d.room = 6;
    d.send_slot = send_slot.data();
    d.row_of_slot = row_of_slot.data();
    d.routed_tokens = routed.data();
    (on_cpu ? cpu::moe_dispatch : ref::moe_dispatch)(x.data(), 3, hidden, ids.data(), 2, d, send_rows.data());
    // Expert 0: turn 1 -> slot 4 (rank 1, slot 1), turn 2 -> slot 0 (rank 0, slot 0); expert 1 the
    // same with slots 5 and 1; experts 2 and 3 have one copy each.
    EXPECT_EQ(send_slot, (std::vector<int32_t>{0, 1, 2, -1, -1, -1, 1, 2, 0, -1, -1, -1})) << on_cpu;
    EXPECT_EQ(row_of_slot, (std::vector<int32_t>{6, 7, 0, 8, 1, 2})) << on_cpu;
    EXPECT_EQ(routed, (std::vector<int64_t>{12, 2, 1, 1})) << on_cpu;
    const std::vector<int> token_of_row = {1, 2, 2, -1, -1, -1, 0, 0, 1, -1, -1, -1};
    for (size_t r = 0; r < token_of_row.size(); ++r) {
      for (int64_t i = 0; i < hidden; ++i) {
        const float want = token_of_row[r] < 0 ? 0.0f : x[static_cast<size_t>(token_of_row[r] * hidden + i)];
        EXPECT_EQ(send_rows[r * hidden + static_cast<size_t>(i)], want) << on_cpu << " row " << r;
      }
    }
  }
}

TEST(CopyRows, CpuMatchesRefAndLeavesGapsAlone) {
  const std::vector<float> src = random_floats(5 * 11, 3);
  std::vector<float> want(5 * 9, -7.0f), got(want);
  ref::copy_rows(src.data() + 2, 11, 5, 6, want.data() + 1, 9);
  cpu::copy_rows(src.data() + 2, 11, 5, 6, got.data() + 1, 9);
  EXPECT_EQ(got, want);
  EXPECT_EQ(want[0], -7.0f);
  EXPECT_EQ(want[1], src[2]);
  EXPECT_EQ(want[9 + 6], src[11 + 7]);
}

std::vector<uint8_t> packed(const std::vector<float>& x, int64_t width, DType dtype) {
  const auto num_rows = static_cast<int64_t>(x.size()) / width;
  std::vector<uint8_t> want(static_cast<size_t>(num_rows * payload_row_bytes(dtype, width)), 0xAB);
  std::vector<uint8_t> got(want);
  ref::pack_rows(x.data(), num_rows, width, dtype, want.data());
  cpu::pack_rows(x.data(), num_rows, width, dtype, got.data());
  EXPECT_EQ(got, want) << dtype_name(dtype) << " width " << width;
  return want;
}

std::vector<float> unpacked(const std::vector<uint8_t>& bytes, int64_t num_rows, int64_t width, DType dtype) {
  std::vector<float> want(static_cast<size_t>(num_rows * width)), got(want.size());
  ref::unpack_rows(bytes.data(), num_rows, width, dtype, want.data());
  cpu::unpack_rows(bytes.data(), num_rows, width, dtype, got.data());
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float))) << dtype_name(dtype);
  return want;
}

TEST(RowPayload, LayoutSizes) {
  EXPECT_EQ(payload_row_bytes(DType::kF32, 2048), 8192);
  EXPECT_EQ(payload_row_bytes(DType::kBF16, 2048), 4096);
  EXPECT_EQ(payload_row_bytes(DType::kF8E4M3, 7168), 7168 + 56 * 4);  // DeepSeek-V3's rows: 56 blocks
  EXPECT_EQ(payload_row_bytes(DType::kF8E4M3, 131), 132 + 2 * 4);     // codes padded to 4 bytes, 2 blocks
}

TEST(RowPayload, Float32AndBf16RoundTrips) {
  for (int64_t width : {1, 64, 131, 300}) {
    const std::vector<float> x = random_floats(static_cast<size_t>(7 * width), 11, -40.0f, 40.0f);
    EXPECT_EQ(unpacked(packed(x, width, DType::kF32), 7, width, DType::kF32), x);
    const std::vector<float> back = unpacked(packed(x, width, DType::kBF16), 7, width, DType::kBF16);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(back[i], bf16_to_f32(f32_to_bf16(x[i]))) << i;
  }
  // Nearest even: 1 + 2^-8 lies halfway between bf16 neighbours 1 and 1 + 2^-7 and goes to 1.
  const std::vector<float> tie = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f};
  EXPECT_EQ(unpacked(packed(tie, 2, DType::kBF16), 1, 2, DType::kBF16), (std::vector<float>{1.0f, 1.0f + 0x1p-6f}));
}

TEST(RowPayload, Fp8RowsCarryAScalePerBlockOf128) {
  // Row 0: block 0 spans [-3, 3] (max 3 -> scale 3/448, 3 itself exact), block 1 is all zeros
  // (scale FLT_MIN, zeros back), block 2 the tail of 44 values. Row 1: random, large and tiny.
  const int64_t width = 300;
  std::vector<float> x(2 * width);
  for (int64_t i = 0; i < 128; ++i) x[i] = -3.0f + 6.0f * static_cast<float>(i) / 127.0f;
  for (int64_t i = 256; i < width; ++i) x[i] = 1e-3f * static_cast<float>(i - 280);
  const std::vector<float> noise = random_floats(static_cast<size_t>(width), 5, -1e4f, 1e4f);
  std::copy(noise.begin(), noise.end(), x.begin() + width);
  const std::vector<uint8_t> bytes = packed(x, width, DType::kF8E4M3);
  const int64_t row_bytes = payload_row_bytes(DType::kF8E4M3, width);
  float scales[3];
  std::memcpy(scales, bytes.data() + 300, sizeof(scales));
  EXPECT_EQ(scales[0], 3.0f / 448.0f);
  EXPECT_EQ(scales[1], FLT_MIN);
  EXPECT_EQ(scales[2], std::fabs(x[256]) / 448.0f);       // -0.024 leads the tail
  EXPECT_EQ(bytes[0], f32_to_f8e4m3(-3.0f / scales[0]));  // -448: the largest code
  EXPECT_EQ(f8e4m3_to_f32(bytes[0]), -448.0f);
  const std::vector<float> back = unpacked(bytes, 2, width, DType::kF8E4M3);
  EXPECT_EQ(back[0], -448.0f * (3.0f / 448.0f));
  for (int64_t i = 128; i < 256; ++i) EXPECT_EQ(back[i], 0.0f) << i;
  // Every value within e4m3's half step (2^-4 relative), or a subnormal step (2^-9 of the scale) near zero.
  for (int64_t r = 0; r < 2; ++r) {
    float block_scale[3];
    std::memcpy(block_scale, bytes.data() + r * row_bytes + 300, sizeof(block_scale));
    for (int64_t i = 0; i < width; ++i) {
      const float v = x[r * width + i];
      const float bound = 1.01f * std::max(std::fabs(v) * 0x1p-4f, block_scale[i / 128] * 0x1p-9f);
      ASSERT_LE(std::fabs(back[r * width + i] - v), bound) << "row " << r << " value " << i;
    }
  }
}

TEST(RowPayload, Fp8InfinitySaturatesWithoutSpoilingItsBlock) {
  std::vector<float> x(130, 1.0f);
  x[3] = -std::numeric_limits<float>::infinity();
  const std::vector<float> back = unpacked(packed(x, 130, DType::kF8E4M3), 1, 130, DType::kF8E4M3);
  EXPECT_EQ(back[3], -448.0f * (FLT_MAX / 448.0f));  // the largest code times the capped scale
  EXPECT_EQ(back[4], 0.0f);                          // 1 is nothing beside it, but not NaN
  EXPECT_EQ(back[129], 1.0f);                        // the next block is untouched
}

}  // namespace
}  // namespace deepinfer::kernels
