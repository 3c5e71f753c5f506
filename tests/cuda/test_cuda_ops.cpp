// Every CUDA op except attention against kernels::ref over many shapes: element-wise ops,
// embedding, norms (RMSNorm, LayerNorm), rope, KV writes, matmul (F32 / BF16 / F16 weights, bias),
// MoE, copy_rows, gather_rows, the row payloads of expert-parallel exchanges; the bf16 cast of GEMM
// inputs; and host copies of every size through the kernel and the DMA paths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

#include "cuda_test_util.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"

namespace deepinfer::testing {
namespace {

constexpr double kEps32 = 1.1920929e-7;

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override { backend_ = cuda_backend(); }
  Backend& backend() { return *backend_; }
  std::unique_ptr<Backend> backend_;
  std::mt19937 rng_{1234};
};

TEST_F(CudaOps, ElementwiseMatchReference) {
  for (int64_t count : {1, 7, 1000, 65537}) {
    const auto a = random_floats(rng_, static_cast<size_t>(count), -6.0f, 6.0f);
    const auto b = random_floats(rng_, static_cast<size_t>(count), -3.0f, 3.0f);
    DeviceBuffer da = upload(backend(), a);
    DeviceBuffer db = upload(backend(), b);
    DeviceBuffer dout = backend().allocate(static_cast<size_t>(count) * sizeof(float));
    std::vector<float> want(static_cast<size_t>(count));
    const std::string n = " count " + std::to_string(count);

    backend().silu_mul(da.as<float>(), db.as<float>(), count, dout.as<float>());
    kernels::ref::silu_mul(a.data(), b.data(), count, want.data());
    expect_close(download<float>(backend(), dout, want.size()), want, 1e-6, 16 * kEps32, "silu_mul" + n);

    backend().gelu_tanh_mul(da.as<float>(), db.as<float>(), count, dout.as<float>());
    kernels::ref::gelu_tanh_mul(a.data(), b.data(), count, want.data());
    expect_close(download<float>(backend(), dout, want.size()), want, 1e-6, 8 * kEps32, "gelu_tanh_mul" + n);

    backend().add(da.as<float>(), db.as<float>(), count, dout.as<float>());
    kernels::ref::add(a.data(), b.data(), count, want.data());
    expect_close(download<float>(backend(), dout, want.size()), want, 0.0, 0.0, "add" + n);

    backend().scale(da.as<float>(), count, 0.37f, dout.as<float>());
    kernels::ref::scale(a.data(), count, 0.37f, want.data());
    expect_close(download<float>(backend(), dout, want.size()), want, 0.0, 0.0, "scale" + n);

    backend().softcap(da.as<float>(), count, 2.5f, dout.as<float>());
    kernels::ref::softcap(a.data(), count, 2.5f, want.data());
    expect_close(download<float>(backend(), dout, want.size()), want, 1e-6, 4 * kEps32, "softcap" + n);

    // In place (out aliases the first input), as the model calls them.
    backend().silu_mul(da.as<float>(), db.as<float>(), count, da.as<float>());
    kernels::ref::silu_mul(a.data(), b.data(), count, want.data());
    expect_close(download<float>(backend(), da, want.size()), want, 1e-6, 16 * kEps32, "silu_mul in place" + n);
  }
}

TEST_F(CudaOps, EmbeddingMatchesReference) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t cols : {1, 33, 4096}) {
      const int64_t rows = 50;
      const HostWeight table = make_weight(random_floats(rng_, static_cast<size_t>(rows * cols)), dtype, rows, cols);
      const kernels::WeightView device_table = load(backend(), table);
      const std::vector<int32_t> ids = {0, 49, 7, 7, 23, 1, 48};
      DeviceBuffer dids = upload(backend(), ids);
      DeviceBuffer dout = backend().allocate(ids.size() * static_cast<size_t>(cols) * sizeof(float));
      backend().embedding(device_table, dids.as<int32_t>(), static_cast<int64_t>(ids.size()), dout.as<float>());
      std::vector<float> want(ids.size() * static_cast<size_t>(cols));
      kernels::ref::embedding(table.view(), ids.data(), static_cast<int64_t>(ids.size()), want.data());
      expect_close(download<float>(backend(), dout, want.size()), want, 0.0, 0.0,
                   "embedding " + std::string(dtype_name(dtype)) + " cols " + std::to_string(cols));
    }
  }
}

TEST_F(CudaOps, NormsMatchReference) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    // 256-thread rows below 2048 columns, 1024-thread rows above; past 4 columns per thread the
    // second pass re-reads from memory.
    for (int64_t dim : {1, 7, 64, 128, 1030, 4099, 8193}) {
      for (float offset : {0.0f, 1.0f}) {
        const int64_t rows = 9;
        const size_t count = static_cast<size_t>(rows * dim);
        const HostWeight w = make_weight(random_floats(rng_, static_cast<size_t>(dim)), dtype, 1, dim);
        const kernels::WeightView dw = load(backend(), w);
        const auto x = random_floats(rng_, count, -3.0f, 3.0f);
        const auto residual = random_floats(rng_, count, -3.0f, 3.0f);
        const std::string what = std::string(dtype_name(dtype)) + " dim " + std::to_string(dim) + " offset " +
                                 std::to_string(offset);
        // Relative error of float32 sum of squares and rsqrt: a few eps times log2(dim).
        const double rel = 16 * kEps32 * std::log2(static_cast<double>(dim) + 2.0);

        DeviceBuffer dx = upload(backend(), x);
        DeviceBuffer dout = backend().allocate(count * sizeof(float));
        std::vector<float> want(count);
        backend().rms_norm(dx.as<float>(), dw, offset, rows, dim, 1e-6f, dout.as<float>());
        kernels::ref::rms_norm(x.data(), w.view(), offset, rows, dim, 1e-6f, want.data());
        expect_close(download<float>(backend(), dout, count), want, 1e-6, rel, "rms_norm " + what);

        DeviceBuffer dres = upload(backend(), residual);
        std::vector<float> want_res = residual;
        // out aliases x, as the decoder calls it.
        backend().add_rms_norm(dres.as<float>(), dx.as<float>(), dw, offset, rows, dim, 1e-6f, dx.as<float>());
        kernels::ref::add_rms_norm(want_res.data(), x.data(), w.view(), offset, rows, dim, 1e-6f, want.data());
        expect_close(download<float>(backend(), dx, count), want, 1e-6, rel, "add_rms_norm out " + what);
        expect_close(download<float>(backend(), dres, count), want_res, 0.0, 0.0, "add_rms_norm residual " + what);
      }
    }
  }
}

// LayerNorm (vision towers): float32 sums on the device against the reference's float64, on rows
// whose mean is far from zero, in place.
TEST_F(CudaOps, LayerNormMatchesReference) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t dim : {1, 7, 1152, 4099}) {
      const int64_t rows = 9;
      const size_t count = static_cast<size_t>(rows * dim);
      const HostWeight w = make_weight(random_floats(rng_, static_cast<size_t>(dim)), dtype, 1, dim);
      const HostWeight b = make_weight(random_floats(rng_, static_cast<size_t>(dim)), dtype, 1, dim);
      const kernels::WeightView dw = load(backend(), w);
      const kernels::WeightView db = load(backend(), b);
      const auto x = random_floats(rng_, count, -3.0f, 30.0f);
      std::vector<float> want(count);
      kernels::ref::layer_norm(x.data(), w.view(), b.view(), rows, dim, 1e-6f, want.data());
      DeviceBuffer dx = upload(backend(), x);
      backend().layer_norm(dx.as<float>(), dw, db, rows, dim, 1e-6f, dx.as<float>());
      const double rel = 64 * kEps32 * std::log2(static_cast<double>(dim) + 2.0);
      expect_close(download<float>(backend(), dx, count), want, 1e-5, rel,
                   std::string("layer_norm ") + std::string(dtype_name(dtype)) + " dim " + std::to_string(dim));
    }
  }
}

TEST_F(CudaOps, RopeMatchesReference) {
  struct Case {
    int32_t num_heads, head_dim, rotary_dim;
    float scaling;
    kernels::RopeLayout layout;
  };
  for (const Case& c : {Case{4, 16, 16, 1.0f, kernels::RopeLayout::kRotateHalf},
                        Case{8, 128, 128, 1.0f, kernels::RopeLayout::kRotateHalf},
                        Case{3, 64, 32, 1.2f, kernels::RopeLayout::kRotateHalf},
                        Case{5, 64, 64, 1.0f, kernels::RopeLayout::kInterleaved},
                        Case{2, 192, 64, 0.9f, kernels::RopeLayout::kInterleaved}}) {
    const int64_t num_tokens = 37;
    std::vector<int32_t> positions(static_cast<size_t>(num_tokens));
    std::uniform_int_distribution<int32_t> pos(0, 200000);
    for (int32_t& p : positions) p = pos(rng_);
    std::vector<float> inv_freq(static_cast<size_t>(c.rotary_dim / 2));
    for (size_t i = 0; i < inv_freq.size(); ++i) {
      inv_freq[i] = static_cast<float>(std::pow(500000.0, -2.0 * static_cast<double>(i) / c.rotary_dim));
    }
    const size_t count = static_cast<size_t>(num_tokens * c.num_heads * c.head_dim);
    std::vector<float> x = random_floats(rng_, count);
    DeviceBuffer dx = upload(backend(), x);
    DeviceBuffer dpos = upload(backend(), positions);
    DeviceBuffer dfreq = upload(backend(), inv_freq);
    backend().rope(dx.as<float>(), dpos.as<int32_t>(), num_tokens, c.num_heads, c.head_dim, c.rotary_dim,
                   dfreq.as<float>(), c.scaling, c.layout);
    kernels::ref::rope(x.data(), positions.data(), num_tokens, c.num_heads, c.head_dim, c.rotary_dim,
                       inv_freq.data(), c.scaling, c.layout);
    expect_close(download<float>(backend(), dx, count), x, 1e-6, 4 * kEps32,
                 "rope head_dim " + std::to_string(c.head_dim) + " rotary " + std::to_string(c.rotary_dim));
  }
}

TEST_F(CudaOps, WriteKvMatchesReference) {
  for (int64_t kv_dim : {6, 256, 1024}) {
    const int64_t num_slots = 64;
    const int64_t num_tokens = 11;
    std::vector<int32_t> slots(static_cast<size_t>(num_slots));
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), rng_);
    slots.resize(static_cast<size_t>(num_tokens));
    const auto k = random_floats(rng_, static_cast<size_t>(num_tokens * kv_dim));
    const auto v = random_floats(rng_, static_cast<size_t>(num_tokens * kv_dim));
    std::vector<float> k_cache = random_floats(rng_, static_cast<size_t>(num_slots * kv_dim));
    std::vector<float> v_cache = random_floats(rng_, static_cast<size_t>(num_slots * kv_dim));
    DeviceBuffer dk = upload(backend(), k);
    DeviceBuffer dv = upload(backend(), v);
    DeviceBuffer dslots = upload(backend(), slots);
    DeviceBuffer dkc = upload(backend(), k_cache);
    DeviceBuffer dvc = upload(backend(), v_cache);
    backend().write_kv(dk.as<float>(), dv.as<float>(), dslots.as<int32_t>(), num_tokens, kv_dim, DType::kF32, {},
                       dkc.data(), dvc.data());
    kernels::ref::write_kv(k.data(), v.data(), slots.data(), num_tokens, kv_dim, DType::kF32, {}, k_cache.data(),
                           v_cache.data());
    expect_close(download<float>(backend(), dkc, k_cache.size()), k_cache, 0.0, 0.0, "k_cache");
    expect_close(download<float>(backend(), dvc, v_cache.size()), v_cache, 0.0, 0.0, "v_cache");
  }
}

// The oracle is ref::matmul on x rounded to the weight's dtype (the GPU multiplies in that dtype
// and accumulates in float32): float32 accumulation error, at most ~K eps for terms below 1.
void check_matmul(Backend& backend, std::mt19937& rng, DType dtype, int64_t m, int64_t n, int64_t k, bool bias) {
  const HostWeight w = make_weight(random_floats(rng, static_cast<size_t>(n * k)), dtype, n, k);
  const HostWeight b = make_weight(random_floats(rng, static_cast<size_t>(n)), dtype, 1, n);
  const kernels::WeightView dw = load(backend, w);
  const kernels::WeightView db = bias ? load(backend, b) : kernels::WeightView{};
  const auto x = random_floats(rng, static_cast<size_t>(m * k));
  std::vector<float> x_rounded = x;
  if (dtype != DType::kF32) x_rounded = make_weight(x, dtype, m, k).rounded;
  DeviceBuffer dx = upload(backend, x);
  DeviceBuffer dy = backend.allocate(static_cast<size_t>(m * n) * sizeof(float));
  backend.matmul(dx.as<float>(), dw, db, m, dy.as<float>());
  std::vector<float> want(static_cast<size_t>(m * n));
  kernels::ref::matmul(x_rounded.data(), w.view(), bias ? b.view() : kernels::WeightView{}, m, want.data());
  expect_close(download<float>(backend, dy, want.size()), want, kEps32 * static_cast<double>(k) + 1e-6, 1e-6,
               "matmul " + std::string(dtype_name(dtype)) + " " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                   std::to_string(k) + (bias ? " +bias" : ""));
}

TEST_F(CudaOps, MatmulMatchesReference) {
  struct Shape {
    int64_t m, n, k;
  };
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    // M <= 2 with K % 8 == 0 takes the GEMV kernel (bf16/f16; K >= 8192: eight rows per block), the
    // rest cuBLASLt.
    for (const Shape& s : {Shape{1, 7, 13}, Shape{3, 64, 64}, Shape{1, 1024, 4096}, Shape{2, 1001, 1032},
                           Shape{1, 37, 8200}, Shape{2, 45, 14336},
                           Shape{4, 513, 2048}, Shape{8, 130, 1024}, Shape{17, 129, 255}, Shape{64, 1000, 512}, Shape{257, 256, 2048}}) {
      // Decode sizes add the bias in the GEMV's epilogue: both ways there.
      for (bool bias : {false, true}) {
        if (bias == (s.m % 2 == 1) || s.m <= 2) check_matmul(backend(), rng_, dtype, s.m, s.n, s.k, bias);
      }
    }
  }
}

TEST_F(CudaOps, BatchInvariantMatmulRowsDoNotDependOnBatch) {
  auto invariant = cuda_backend(/*batch_invariant=*/true);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const int64_t n = 384;
    const int64_t k = 1024;
    const HostWeight w = make_weight(random_floats(rng_, static_cast<size_t>(n * k)), dtype, n, k);
    const kernels::WeightView dw = load(*invariant, w);
    const auto x = random_floats(rng_, static_cast<size_t>(300 * k));
    DeviceBuffer dx = upload(*invariant, x);
    DeviceBuffer dy = invariant->allocate(static_cast<size_t>(300 * n) * sizeof(float));
    invariant->matmul(dx.as<float>(), dw, kernels::WeightView{}, 1, dy.as<float>());
    const std::vector<float> alone = download<float>(*invariant, dy, static_cast<size_t>(n));
    for (int64_t m : {2, 8, 64, 300}) {
      invariant->matmul(dx.as<float>(), dw, kernels::WeightView{}, m, dy.as<float>());
      const std::vector<float> batched = download<float>(*invariant, dy, static_cast<size_t>(n));
      EXPECT_EQ(std::memcmp(alone.data(), batched.data(), alone.size() * sizeof(float)), 0)
          << dtype_name(dtype) << ": row 0 alone differs from row 0 of " << m << " rows";
    }
  }
}

TEST_F(CudaOps, CopyRowsMatchesReference) {
  const auto src = random_floats(rng_, 10 * 37);
  std::vector<float> dst = random_floats(rng_, 10 * 21);
  DeviceBuffer dsrc = upload(backend(), src);
  DeviceBuffer ddst = upload(backend(), dst);
  backend().copy_rows(dsrc.as<float>() + 3, 37, 9, 17, ddst.as<float>() + 2, 21);
  kernels::ref::copy_rows(src.data() + 3, 37, 9, 17, dst.data() + 2, 21);
  expect_close(download<float>(backend(), ddst, dst.size()), dst, 0.0, 0.0, "copy_rows");
}

// The row payloads of expert-parallel exchanges: the device's bytes and floats are the reference's,
// on rows with blocks of zeros, tiny values, an infinity, values past e4m3's range before scaling,
// and widths off the block.
TEST_F(CudaOps, RowPayloadsMatchReferenceBytes) {
  for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
    for (int64_t width : {1, 64, 131, 300, 2048}) {
      const int64_t rows = 37;
      std::vector<float> x = random_floats(rng_, static_cast<size_t>(rows * width), -3e3f, 3e3f);
      std::fill(x.begin(), x.begin() + std::min<int64_t>(width, 128), 0.0f);
      // Row 1: tiny values (scales near FLT_MIN) and an infinity (the capped scale).
      for (int64_t i = width; i < 2 * width; ++i) x[static_cast<size_t>(i)] *= 1e-33f;
      x[static_cast<size_t>(width)] = std::numeric_limits<float>::infinity();
      const auto row_bytes = static_cast<size_t>(kernels::payload_row_bytes(dtype, width));
      std::vector<uint8_t> want(row_bytes * static_cast<size_t>(rows));
      kernels::ref::pack_rows(x.data(), rows, width, dtype, want.data());
      DeviceBuffer dx = upload(backend(), x);
      DeviceBuffer dpacked = backend().allocate(want.size());
      backend().pack_rows(dx.as<float>(), rows, width, dtype, dpacked.data());
      const std::string what = std::string(dtype_name(dtype)) + " width " + std::to_string(width);
      EXPECT_EQ(download<uint8_t>(backend(), dpacked, want.size()), want) << what;
      std::vector<float> back(x.size());
      kernels::ref::unpack_rows(want.data(), rows, width, dtype, back.data());
      DeviceBuffer dback = backend().allocate(back.size() * sizeof(float));
      backend().unpack_rows(dpacked.data(), rows, width, dtype, dback.as<float>());
      // Bit for bit (the infinity included, which no tolerance compares).
      const std::vector<float> got = download<float>(backend(), dback, back.size());
      EXPECT_EQ(std::memcmp(got.data(), back.data(), back.size() * sizeof(float)), 0) << "unpack_rows " << what;
    }
  }
}

TEST_F(CudaOps, GatherRowsMatchesReference) {
  std::uniform_int_distribution<int32_t> value(-1000, 1000);
  for (int64_t width : {1, 3, 256}) {
    for (int64_t rows : {1, 5, 300}) {
      std::vector<int32_t> src(static_cast<size_t>(2 * rows * width));
      std::vector<int32_t> dst(static_cast<size_t>(rows * width));
      for (int32_t& v : src) v = value(rng_);
      for (int32_t& v : dst) v = value(rng_);
      std::vector<int32_t> row_of(static_cast<size_t>(rows));
      std::uniform_int_distribution<int32_t> from(-1, static_cast<int32_t>(2 * rows - 1));
      for (int32_t& r : row_of) r = from(rng_);
      const DeviceBuffer dsrc = upload(backend(), src);
      const DeviceBuffer drow_of = upload(backend(), row_of);
      for (const bool identity : {false, true}) {
        std::vector<int32_t> want = dst;
        DeviceBuffer ddst = upload(backend(), dst);
        const int32_t* rows_from = identity ? nullptr : row_of.data();
        backend().gather_rows(dsrc.as<int32_t>(), identity ? nullptr : drow_of.as<int32_t>(), rows, width,
                              ddst.as<int32_t>());
        kernels::ref::gather_rows(src.data(), rows_from, rows, width, want.data());
        EXPECT_EQ(download<int32_t>(backend(), ddst, want.size()), want)
            << "width " << width << ", rows " << rows << (identity ? ", identity" : "");
      }
    }
  }
}

TEST_F(CudaOps, HostCopiesOfEverySizeArriveWhole) {
  // Up to 1 MiB a copy is a kernel on mapped pinned memory, above it DMA; odd sizes take DMA too.
  constexpr size_t kMiB = size_t{1} << 20;
  for (size_t bytes : {size_t{4}, size_t{6}, size_t{4096}, kMiB, kMiB + 4, 3 * kMiB}) {
    std::vector<uint8_t> host(bytes);
    for (uint8_t& b : host) b = static_cast<uint8_t>(rng_());
    const DeviceBuffer device = upload(backend(), host);
    EXPECT_EQ(download<uint8_t>(backend(), device, bytes), host) << bytes << " bytes to the device and back";
    // Two pieces into one readback slot, waited for later.
    std::vector<uint8_t> first(bytes / 2);
    std::vector<uint8_t> second(bytes - bytes / 2);
    auto pending = backend().copy_to_host_later({{first.data(), device.data(), first.size()},
                                                 {second.data(), device.as<uint8_t>() + first.size(), second.size()}});
    pending->wait();
    first.insert(first.end(), second.begin(), second.end());
    EXPECT_EQ(first, host) << bytes << " bytes read back later";
  }
}

TEST_F(CudaOps, MoeMatchesReference) {
  const int64_t hidden = 48;
  const int64_t inter = 40;
  const int32_t num_experts = 8;
  const int64_t num_tokens = 13;
  kernels::MoeRouting routing;
  routing.num_experts = num_experts;
  routing.top_k = 3;
  routing.normalize = true;
  for (kernels::ExpertActivation activation :
       {kernels::ExpertActivation::kSiluGated, kernels::ExpertActivation::kClampedSwiglu}) {
    std::vector<HostWeight> host[3];
    std::vector<kernels::WeightView> host_views[3];
    std::vector<kernels::WeightView> device_views[3];
    for (int32_t e = 0; e < num_experts; ++e) {
      const int64_t shapes[3][2] = {{inter, hidden}, {inter, hidden}, {hidden, inter}};
      for (int p = 0; p < 3; ++p) {
        host[p].push_back(make_weight(random_floats(rng_, static_cast<size_t>(shapes[p][0] * shapes[p][1])),
                                      DType::kF32, shapes[p][0], shapes[p][1]));
      }
    }
    for (int p = 0; p < 3; ++p) {
      for (const HostWeight& w : host[p]) {
        host_views[p].push_back(w.view());
        device_views[p].push_back(load(backend(), w));
      }
    }
    kernels::MoeExperts host_experts;
    host_experts.num_experts = num_experts;
    host_experts.top_k = routing.top_k;
    host_experts.hidden = hidden;
    host_experts.intermediate = inter;
    host_experts.activation = activation;
    kernels::MoeExperts device_experts = host_experts;
    host_experts.gate = host_views[0].data();
    host_experts.up = host_views[1].data();
    host_experts.down = host_views[2].data();
    device_experts.gate = device_views[0].data();
    device_experts.up = device_views[1].data();
    device_experts.down = device_views[2].data();

    const auto logits = random_floats(rng_, static_cast<size_t>(num_tokens * num_experts), -2.0f, 2.0f);
    const auto x = random_floats(rng_, static_cast<size_t>(num_tokens * hidden));
    const auto picks = static_cast<size_t>(num_tokens * routing.top_k);
    std::vector<int32_t> want_ids(picks);
    std::vector<float> want_weights(picks);
    kernels::ref::moe_route(logits.data(), kernels::WeightView{}, num_tokens, routing, want_ids.data(),
                            want_weights.data());
    std::vector<float> workspace(static_cast<size_t>(kernels::moe_workspace_floats(num_tokens, host_experts)));
    std::vector<int64_t> want_counts(num_experts, 0);
    std::vector<float> want(static_cast<size_t>(num_tokens * hidden));
    kernels::ref::moe_experts(x.data(), num_tokens, want_ids.data(), want_weights.data(), host_experts,
                              workspace.data(), want_counts.data(), want.data());

    DeviceBuffer dlogits = upload(backend(), logits);
    DeviceBuffer dids = backend().allocate(picks * sizeof(int32_t));
    DeviceBuffer dweights = backend().allocate(picks * sizeof(float));
    backend().moe_route(dlogits.as<float>(), kernels::WeightView{}, num_tokens, routing, dids.as<int32_t>(),
                        dweights.as<float>());
    EXPECT_EQ(download<int32_t>(backend(), dids, picks), want_ids);
    expect_close(download<float>(backend(), dweights, picks), want_weights, 0.0, 1e-6, "moe_route weights");
    DeviceBuffer dx = upload(backend(), x);
    DeviceBuffer dworkspace = backend().allocate(workspace.size() * sizeof(float));
    DeviceBuffer dcounts = backend().allocate(num_experts * sizeof(int64_t));
    DeviceBuffer dout = backend().allocate(want.size() * sizeof(float));
    backend().moe_experts(dx.as<float>(), num_tokens, dids.as<int32_t>(), dweights.as<float>(), device_experts,
                          dworkspace.as<float>(), dcounts.as<int64_t>(), dout.as<float>());
    expect_close(download<float>(backend(), dout, want.size()), want, 1e-4, 1e-5, "moe_experts");
    EXPECT_EQ(download<int64_t>(backend(), dcounts, num_experts), want_counts);
  }
}

// The cast that stages float32 GEMM inputs as bf16, bit for bit against the host's round-to-nearest-
// even: four values a thread where both buffers are aligned (with a tail), one a thread otherwise.
TEST_F(CudaOps, CastToBf16MatchesHostRounding) {
  for (int64_t count : {1, 3, 4, 1001, 65539}) {
    for (int64_t offset : {0, 1}) {
      const auto x = random_floats(rng_, static_cast<size_t>(count), -100.0f, 100.0f);
      std::vector<float> padded(static_cast<size_t>(offset), 0.0f);
      padded.insert(padded.end(), x.begin(), x.end());
      DeviceBuffer dx = upload(backend(), padded);
      DeviceBuffer dout = backend().allocate(static_cast<size_t>(count + offset) * sizeof(uint16_t));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the backend's uploads, on its own stream
      kernels::cuda::cast_from_f32(dx.as<float>() + offset, count, DType::kBF16, dout.as<uint16_t>() + offset, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<uint16_t> got = download<uint16_t>(backend(), dout, static_cast<size_t>(count + offset));
      const HostWeight want = make_weight(x, DType::kBF16, 1, count);
      ASSERT_EQ(std::memcmp(got.data() + offset, want.bytes.data(), want.bytes.size()), 0)
          << "count " << count << " offset " << offset;
    }
  }
}

}  // namespace
}  // namespace deepinfer::testing
