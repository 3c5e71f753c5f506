// The device mixture of experts against kernels::ref: the router over DeepSeek-V2/V3, Qwen3-MoE,
// Mixtral and GPT-OSS routings (ids exact, weights to 1e-6), grouping by expert, and the grouped
// expert kernels (both kernels, every weight dtype, odd shapes, biases, both activations, experts
// without tokens), the per-expert counters, and batch invariance in invariant mode; the router
// launch that groups its own rows against the router and the grouping apart; expert parallelism's
// fixed-size dispatch plan against kernels::ref.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "cuda_test_util.h"
#include "kernels/cuda/moe_ops.h"
#include "kernels/ops.h"

namespace deepinfer::testing {
namespace {

constexpr double kEps32 = 1.1920929e-7;

class CudaMoe : public ::testing::Test {
 protected:
  void SetUp() override { backend_ = cuda_backend(); }
  Backend& backend() { return *backend_; }
  std::unique_ptr<Backend> backend_;
  std::mt19937 rng_{2026};
};

struct RouteCase {
  const char* name;
  int32_t num_experts, top_k;
  kernels::MoeScoring scoring;
  int32_t num_groups, top_groups;
  kernels::MoeGroupScore group_score;
  bool bias, normalize;
  float scaling;

  kernels::MoeRouting routing() const {
    kernels::MoeRouting r;
    r.num_experts = num_experts;
    r.top_k = top_k;
    r.scoring = scoring;
    r.num_groups = num_groups;
    r.top_groups = top_groups;
    r.group_score = group_score;
    r.normalize = normalize;
    r.scaling = scaling;
    return r;
  }
};

TEST_F(CudaMoe, RouterMatchesReference) {
  using kernels::MoeGroupScore;
  using kernels::MoeScoring;
  const RouteCase cases[] = {
      {"mixtral", 8, 2, MoeScoring::kSoftmax, 1, 1, MoeGroupScore::kMax, false, true, 1.0f},
      {"top1", 8, 1, MoeScoring::kSoftmax, 1, 1, MoeGroupScore::kMax, false, false, 1.0f},
      {"gpt-oss", 32, 4, MoeScoring::kSoftmax, 1, 1, MoeGroupScore::kMax, false, true, 1.0f},
      {"v2-lite", 64, 6, MoeScoring::kSoftmax, 1, 1, MoeGroupScore::kMax, false, false, 1.0f},
      {"qwen3", 128, 8, MoeScoring::kSoftmax, 1, 1, MoeGroupScore::kMax, false, true, 1.0f},
      {"v2", 160, 6, MoeScoring::kSoftmax, 8, 3, MoeGroupScore::kMax, false, false, 16.0f},
      {"v3", 256, 8, MoeScoring::kSigmoid, 8, 4, MoeGroupScore::kTopTwoSum, true, true, 2.5f},
      {"sigmoid-odd", 60, 5, MoeScoring::kSigmoid, 1, 1, MoeGroupScore::kMax, true, false, 1.0f},
      {"groups-of-1", 48, 7, MoeScoring::kSoftmax, 48, 9, MoeGroupScore::kTopTwoSum, true, true, 1.5f},
      {"all-experts", 20, 20, MoeScoring::kSigmoid, 4, 4, MoeGroupScore::kMax, false, true, 1.0f},
  };
  for (const RouteCase& c : cases) {
    const kernels::MoeRouting routing = c.routing();
    const HostWeight bias = make_weight(random_floats(rng_, static_cast<size_t>(c.num_experts), -0.1f, 0.1f),
                                        DType::kF32, 1, c.num_experts);
    const kernels::WeightView device_bias = c.bias ? load(backend(), bias) : kernels::WeightView{};
    const kernels::WeightView host_bias = c.bias ? bias.view() : kernels::WeightView{};
    for (int64_t num_tokens : {1, 7, 33, 257}) {
      for (bool ties : {false, true}) {
        auto logits = random_floats(rng_, static_cast<size_t>(num_tokens * c.num_experts), -4.0f, 4.0f);
        // Few distinct values: many exact ties, which go to the lower expert id.
        if (ties) {
          for (float& v : logits) v = std::round(v);
        }
        const auto picks = static_cast<size_t>(num_tokens * c.top_k);
        std::vector<int32_t> want_ids(picks);
        std::vector<float> want_weights(picks);
        kernels::ref::moe_route(logits.data(), host_bias, num_tokens, routing, want_ids.data(), want_weights.data());
        DeviceBuffer dlogits = upload(backend(), logits);
        DeviceBuffer dids = backend().allocate(picks * sizeof(int32_t));
        DeviceBuffer dweights = backend().allocate(picks * sizeof(float));
        backend().moe_route(dlogits.as<float>(), device_bias, num_tokens, routing, dids.as<int32_t>(),
                            dweights.as<float>());
        const std::string what = std::string(c.name) + " tokens " + std::to_string(num_tokens) + (ties ? " ties" : "");
        EXPECT_EQ(download<int32_t>(backend(), dids, picks), want_ids) << what;
        expect_close(download<float>(backend(), dweights, picks), want_weights, 0.0, 1e-6, what);
      }
    }
  }
}

// The router's launch grouping its own rows (its last block): the same ids and weights as the
// router alone, bit for bit, and the grouping group_by_expert makes of them; twice per shape, so a
// launch that left its block counter set would show in the second.
TEST_F(CudaMoe, RouteAndGroupMatchesRouteThenGroup) {
  namespace kc = kernels::cuda;
  using kernels::MoeGroupScore;
  using kernels::MoeScoring;
  const RouteCase cases[] = {
      {"top1", 8, 1, MoeScoring::kSoftmax, 1, 1, MoeGroupScore::kMax, false, false, 1.0f},
      {"gpt-oss", 32, 4, MoeScoring::kSoftmax, 1, 1, MoeGroupScore::kMax, false, true, 1.0f},
      {"v2-lite", 64, 6, MoeScoring::kSoftmax, 1, 1, MoeGroupScore::kMax, false, false, 1.0f},
      {"qwen3", 128, 8, MoeScoring::kSoftmax, 1, 1, MoeGroupScore::kMax, false, true, 1.0f},
      {"v3", 256, 8, MoeScoring::kSigmoid, 8, 4, MoeGroupScore::kTopTwoSum, true, true, 2.5f},
      {"sigmoid-odd", 60, 5, MoeScoring::kSigmoid, 1, 1, MoeGroupScore::kMax, true, false, 1.0f},
  };
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  DeviceBuffer blocks_done = upload(backend(), std::vector<int32_t>{0});
  for (const RouteCase& c : cases) {
    const kernels::MoeRouting routing = c.routing();
    const HostWeight bias = make_weight(random_floats(rng_, static_cast<size_t>(c.num_experts), -0.1f, 0.1f),
                                        DType::kF32, 1, c.num_experts);
    const kernels::WeightView device_bias = c.bias ? load(backend(), bias) : kernels::WeightView{};
    const int64_t max_tokens = kc::moe_route_group_max_rows(c.num_experts) / c.top_k;
    for (int64_t num_tokens : {int64_t{1}, int64_t{2}, int64_t{5}, max_tokens}) {
      for (kc::MoeKernel kernel : {kc::MoeKernel::kRowwise, kc::MoeKernel::kTensorCore}) {
        const std::string what = std::string(c.name) + " tokens " + std::to_string(num_tokens) +
                                 (kernel == kc::MoeKernel::kRowwise ? " rowwise" : " tensor cores");
        const int64_t num_rows = num_tokens * c.top_k;
        DeviceBuffer logits =
            upload(backend(), random_floats(rng_, static_cast<size_t>(num_tokens * c.num_experts), -4.0f, 4.0f));
        DeviceBuffer want_ids = backend().allocate(static_cast<size_t>(num_rows) * sizeof(int32_t));
        DeviceBuffer want_weights = backend().allocate(static_cast<size_t>(num_rows) * sizeof(float));
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the backend's uploads, on its own stream
        kc::moe_route(logits.as<float>(), device_bias, num_tokens, routing, want_ids.as<int32_t>(),
                      want_weights.as<float>(), stream);
        const int64_t num_ints = kc::moe_grouping_ints(c.num_experts, num_rows);
        DeviceBuffer ints = backend().allocate(static_cast<size_t>(num_ints) * sizeof(int32_t));
        const kc::MoeGrouping grouping = kc::carve_moe_grouping(ints.as<int32_t>(), c.num_experts, num_rows);
        const int32_t rows_per_tile = kc::moe_rows_per_tile(kernel);
        for (int launch = 0; launch < 2; ++launch) {
          std::vector<int64_t> counts(static_cast<size_t>(c.num_experts));
          for (int32_t e = 0; e < c.num_experts; ++e) counts[static_cast<size_t>(e)] = 10 * e;
          DeviceBuffer dcounts = upload(backend(), counts);
          DeviceBuffer ids = backend().allocate(static_cast<size_t>(num_rows) * sizeof(int32_t));
          DeviceBuffer weights = backend().allocate(static_cast<size_t>(num_rows) * sizeof(float));
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          ASSERT_EQ(cudaMemsetAsync(ints.data(), 0xff, static_cast<size_t>(num_ints) * sizeof(int32_t), stream),
                    cudaSuccess);
          kc::moe_route_and_group(logits.as<float>(), device_bias, num_tokens, routing, ids.as<int32_t>(),
                                  weights.as<float>(), rows_per_tile, grouping, dcounts.as<int64_t>(),
                                  blocks_done.as<int32_t>(), stream);
          ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess) << what;
          const std::vector<int32_t> got_ids = download<int32_t>(backend(), ids, static_cast<size_t>(num_rows));
          ASSERT_EQ(got_ids, download<int32_t>(backend(), want_ids, static_cast<size_t>(num_rows))) << what;
          const std::vector<float> got_weights = download<float>(backend(), weights, static_cast<size_t>(num_rows));
          const std::vector<float> want = download<float>(backend(), want_weights, static_cast<size_t>(num_rows));
          ASSERT_EQ(std::memcmp(got_weights.data(), want.data(), want.size() * sizeof(float)), 0) << what;
          ASSERT_EQ(download<int32_t>(backend(), blocks_done, 1)[0], 0) << what;

          const std::vector<int32_t> host_ints = download<int32_t>(backend(), ints, static_cast<size_t>(num_ints));
          const kc::MoeGrouping host =
              kc::carve_moe_grouping(const_cast<int32_t*>(host_ints.data()), c.num_experts, num_rows);
          const std::vector<int64_t> got_counts =
              download<int64_t>(backend(), dcounts, static_cast<size_t>(c.num_experts));
          std::vector<int32_t> per_expert(static_cast<size_t>(c.num_experts), 0);
          for (int32_t id : got_ids) ++per_expert[static_cast<size_t>(id)];
          int32_t offset = 0;
          int32_t tiles = 0;
          for (int32_t e = 0; e < c.num_experts; ++e) {
            const int32_t count = per_expert[static_cast<size_t>(e)];
            ASSERT_EQ(host.counts[e], count) << what << ", expert " << e;
            ASSERT_EQ(host.offsets[e], offset) << what << ", expert " << e;
            ASSERT_EQ(host.tile_offsets[e], tiles) << what << ", expert " << e;
            EXPECT_EQ(got_counts[static_cast<size_t>(e)], 10 * e + count) << what << ", expert " << e;
            for (int32_t i = offset; i < offset + count; ++i) {
              ASSERT_EQ(got_ids[static_cast<size_t>(host.rows[i])], e) << what << ", grouped row " << i;
              ASSERT_EQ(host.position[host.rows[i]], i) << what << ", grouped row " << i;
            }
            const int32_t expert_tiles = (count + rows_per_tile - 1) / rows_per_tile;
            for (int32_t t = tiles; t < tiles + expert_tiles; ++t) {
              ASSERT_EQ(host.tile_experts[t], e) << what << ", tile " << t;
            }
            offset += count;
            tiles += expert_tiles;
          }
          EXPECT_EQ(host.offsets[c.num_experts], num_rows) << what;
          EXPECT_EQ(host.tile_offsets[c.num_experts], tiles) << what;
        }
      }
    }
  }
  cudaStreamDestroy(stream);
}

// Expert parallelism's fixed-size dispatch planned on the device against kernels::ref (the host's
// order): random placements with copies of some experts, every rank, empty ranks and idle rounds.
TEST_F(CudaMoe, DispatchPlansTheReferencesRows) {
  struct Case {
    int32_t num_logical, world, redundant, top_k;
    int64_t num_tokens, round_tokens, hidden;
  };
  const Case cases[] = {{8, 2, 0, 2, 5, 5, 12},       {8, 2, 2, 2, 1, 3, 8},       {32, 4, 4, 4, 64, 64, 36},
                        {256, 8, 8, 8, 256, 256, 20}, {256, 64, 64, 8, 37, 40, 4}, {64, 4, 0, 6, 0, 7, 16},
                        {128, 16, 16, 8, 100, 128, 9}};
  for (const Case& c : cases) {
    const int32_t slots_per_rank = (c.num_logical + c.redundant) / c.world;
    // Physical slots: every expert once, then copies of random experts, shuffled over the ranks.
    std::vector<int32_t> physical_to_logical(static_cast<size_t>(slots_per_rank * c.world));
    for (size_t p = 0; p < physical_to_logical.size(); ++p) {
      physical_to_logical[p] = p < static_cast<size_t>(c.num_logical)
                                   ? static_cast<int32_t>(p)
                                   : std::uniform_int_distribution<int32_t>(0, c.num_logical - 1)(rng_);
    }
    std::shuffle(physical_to_logical.begin(), physical_to_logical.end(), rng_);
    std::vector<int32_t> offsets = {0}, slots;
    for (int32_t e = 0; e < c.num_logical; ++e) {
      for (size_t p = 0; p < physical_to_logical.size(); ++p) {
        if (physical_to_logical[p] == e) slots.push_back(static_cast<int32_t>(p));
      }
      offsets.push_back(static_cast<int32_t>(slots.size()));
    }
    // Distinct experts per token, skewed towards the first few.
    std::vector<int32_t> ids;
    for (int64_t t = 0; t < c.num_tokens; ++t) {
      std::vector<int32_t> chosen;
      while (static_cast<int32_t>(chosen.size()) < c.top_k) {
        const int32_t e = std::min(std::geometric_distribution<int32_t>(0.2)(rng_), c.num_logical - 1);
        if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
      }
      ids.insert(ids.end(), chosen.begin(), chosen.end());
    }
    const std::vector<float> x = random_floats(rng_, static_cast<size_t>(c.num_tokens * c.hidden));
    const int64_t room = c.round_tokens * std::min(c.top_k, slots_per_rank);
    const int64_t num_rows = c.world * room;
    const int64_t num_slots = c.num_tokens * c.top_k;
    for (int32_t rank = 0; rank < c.world; rank += std::max(1, c.world / 3)) {
      const std::string where = "experts " + std::to_string(c.num_logical) + " world " + std::to_string(c.world) +
                                " tokens " + std::to_string(c.num_tokens) + " rank " + std::to_string(rank);
      std::vector<int32_t> want_slot(static_cast<size_t>(num_rows)), want_row(static_cast<size_t>(num_slots));
      std::vector<int64_t> want_routed(static_cast<size_t>(c.num_logical), 5);
      std::vector<float> want_rows(static_cast<size_t>(num_rows * c.hidden));
      kernels::ExpertDispatch d;
      d.replica_offsets = offsets.data();
      d.replica_slots = slots.data();
      d.num_logical = c.num_logical;
      d.slots_per_rank = slots_per_rank;
      d.world = c.world;
      d.rank = rank;
      d.room = room;
      d.send_slot = want_slot.data();
      d.row_of_slot = want_row.data();
      d.routed_tokens = want_routed.data();
      kernels::ref::moe_dispatch(x.data(), c.num_tokens, c.hidden, ids.data(), c.top_k, d, want_rows.data());

      const DeviceBuffer doffsets = upload(backend(), offsets), dslots = upload(backend(), slots);
      const DeviceBuffer dids = upload(backend(), ids), dx = upload(backend(), x);
      DeviceBuffer dsend_slot = backend().allocate(static_cast<size_t>(num_rows) * sizeof(int32_t));
      DeviceBuffer drow = backend().allocate(static_cast<size_t>(std::max<int64_t>(num_slots, 1)) * sizeof(int32_t));
      DeviceBuffer drouted = upload(backend(), std::vector<int64_t>(static_cast<size_t>(c.num_logical), 5));
      DeviceBuffer dscratch = backend().allocate(
          static_cast<size_t>(kernels::moe_dispatch_scratch_ints(num_slots, c.world, room)) * sizeof(int32_t));
      DeviceBuffer drows = upload(backend(), std::vector<float>(static_cast<size_t>(num_rows * c.hidden), NAN));
      d.replica_offsets = doffsets.as<int32_t>();
      d.replica_slots = dslots.as<int32_t>();
      d.send_slot = dsend_slot.as<int32_t>();
      d.row_of_slot = drow.as<int32_t>();
      d.routed_tokens = drouted.as<int64_t>();
      d.scratch = dscratch.as<int32_t>();
      backend().moe_dispatch(dx.as<float>(), c.num_tokens, c.hidden, dids.as<int32_t>(), c.top_k, d, drows.as<float>());
      EXPECT_EQ(download<int32_t>(backend(), dsend_slot, want_slot.size()), want_slot) << where;
      EXPECT_EQ(download<int32_t>(backend(), drow, want_row.size()), want_row) << where;
      EXPECT_EQ(download<int64_t>(backend(), drouted, want_routed.size()), want_routed) << where;
      EXPECT_EQ(download<float>(backend(), drows, want_rows.size()), want_rows) << where;
    }
  }
}

TEST_F(CudaMoe, GroupingIsAPermutationByExpert) {
  const int32_t num_experts = 37;
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  for (int64_t num_rows : {1, 6, 999, 8192, 8193, 4096 * 8}) {  // one block up to 8192 rows
    for (kernels::cuda::MoeKernel kernel : {kernels::cuda::MoeKernel::kRowwise, kernels::cuda::MoeKernel::kTensorCore}) {
      // Experts 30.. get no rows.
      std::uniform_int_distribution<int32_t> pick(0, 29);
      std::vector<int32_t> ids(static_cast<size_t>(num_rows));
      for (int32_t& id : ids) id = pick(rng_);
      const int64_t num_ints = kernels::cuda::moe_grouping_ints(num_experts, num_rows);
      int32_t* dids = nullptr;
      int32_t* dints = nullptr;
      int64_t* dcounts = nullptr;
      ASSERT_EQ(cudaMalloc(&dids, ids.size() * sizeof(int32_t)), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&dints, static_cast<size_t>(num_ints) * sizeof(int32_t)), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&dcounts, num_experts * sizeof(int64_t)), cudaSuccess);
      std::vector<int64_t> counts(num_experts);
      for (int32_t e = 0; e < num_experts; ++e) counts[static_cast<size_t>(e)] = 100 + e;
      cudaMemcpy(dids, ids.data(), ids.size() * sizeof(int32_t), cudaMemcpyHostToDevice);
      cudaMemcpy(dcounts, counts.data(), counts.size() * sizeof(int64_t), cudaMemcpyHostToDevice);
      const kernels::cuda::MoeGrouping grouping = kernels::cuda::carve_moe_grouping(dints, num_experts, num_rows);
      const int32_t rows_per_tile = kernels::cuda::moe_rows_per_tile(kernel);
      kernels::cuda::group_by_expert(dids, num_rows, num_experts, rows_per_tile, grouping, dcounts, stream);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      std::vector<int32_t> ints(static_cast<size_t>(num_ints));
      std::vector<int64_t> got_counts(num_experts);
      cudaMemcpy(ints.data(), dints, ints.size() * sizeof(int32_t), cudaMemcpyDeviceToHost);
      cudaMemcpy(got_counts.data(), dcounts, got_counts.size() * sizeof(int64_t), cudaMemcpyDeviceToHost);
      cudaFree(dids);
      cudaFree(dints);
      cudaFree(dcounts);
      const kernels::cuda::MoeGrouping host = kernels::cuda::carve_moe_grouping(ints.data(), num_experts, num_rows);

      std::vector<int32_t> want(num_experts, 0);
      for (int32_t id : ids) ++want[static_cast<size_t>(id)];
      int32_t offset = 0;
      int32_t tiles = 0;
      for (int32_t e = 0; e < num_experts; ++e) {
        ASSERT_EQ(host.counts[e], want[static_cast<size_t>(e)]) << "expert " << e;
        ASSERT_EQ(host.offsets[e], offset) << "expert " << e;
        ASSERT_EQ(host.tile_offsets[e], tiles) << "expert " << e;
        EXPECT_EQ(got_counts[static_cast<size_t>(e)], counts[static_cast<size_t>(e)] + want[static_cast<size_t>(e)]);
        for (int32_t i = offset; i < offset + want[static_cast<size_t>(e)]; ++i) {
          ASSERT_EQ(ids[static_cast<size_t>(host.rows[i])], e) << "grouped row " << i;
          ASSERT_EQ(host.position[host.rows[i]], i) << "grouped row " << i;
        }
        offset += want[static_cast<size_t>(e)];
        const int32_t expert_tiles = (want[static_cast<size_t>(e)] + rows_per_tile - 1) / rows_per_tile;
        for (int32_t t = tiles; t < tiles + expert_tiles; ++t) ASSERT_EQ(host.tile_experts[t], e) << "tile " << t;
        tiles += expert_tiles;
      }
      EXPECT_EQ(host.offsets[num_experts], num_rows);
      EXPECT_EQ(host.tile_offsets[num_experts], tiles);
      EXPECT_LE(tiles, kernels::cuda::moe_max_tiles(kernel, num_rows, num_experts));
    }
  }
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace deepinfer::testing
