// CudaBackend::scatter_to_device: a KV page lying in a pinned slab goes to every layer's K and V
// blocks in one kernel launch; the cache must hold exactly the bytes the per-piece path (host-side
// bf16 rounding, one copy per block: Backend's default) writes from the same page in ordinary memory.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <limits>
#include <random>

#include "core/dtype.h"
#include "cuda_test_util.h"

namespace deepinfer::testing {
namespace {

struct ScatterCase {
  int num_layers;
  size_t floats_per_block;  // K (and V) of one layer's block
  DType dtype;
  size_t page_offset;  // bytes before the payload (4: words not 16-byte aligned)
};

// Floats with the values rounding cares about: NaNs, infinities, ties to even, denormals.
std::vector<float> page_values(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = std::bit_cast<float>(static_cast<uint32_t>(rng()));
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::bit_cast<float>(0x3f808000u),
                            std::bit_cast<float>(0x3f818000u), std::bit_cast<float>(0x00000001u), -0.0f,
                            std::bit_cast<float>(0x7f800001u)};
  for (size_t i = 0; i < std::size(specials) && i < count; ++i) values[i * 7 % count] = specials[i];
  return values;
}

void check_case(const ScatterCase& c) {
  SCOPED_TRACE(::testing::Message() << c.num_layers << " layers, " << c.floats_per_block << " floats/block, "
                                    << dtype_name(c.dtype) << ", payload at +" << c.page_offset);
  auto backend = cuda_backend();
  const size_t element = dtype_size_bytes(c.dtype);
  const size_t src_bytes = c.floats_per_block * sizeof(float);
  const size_t page_bytes = c.page_offset + 2 * static_cast<size_t>(c.num_layers) * src_bytes;
  // Slabs are rounded up to kSlabAlign: a region of one rounded slab.
  constexpr size_t kAlign = HostSlabPool::kSlabAlign;
  const size_t slab_bytes = (page_bytes + kAlign - 1) / kAlign * kAlign;
  std::shared_ptr<HostSlabPool> pool = backend->make_pinned_pool(slab_bytes, page_bytes);
  ASSERT_NE(pool, nullptr);
  auto* slab = static_cast<uint8_t*>(pool->take(page_bytes));
  ASSERT_NE(slab, nullptr);
  const std::vector<float> values = page_values(2 * static_cast<size_t>(c.num_layers) * c.floats_per_block, 7);
  std::vector<uint8_t> pageable(page_bytes);
  std::memcpy(pageable.data() + c.page_offset, values.data(), values.size() * sizeof(float));
  std::memcpy(slab, pageable.data(), page_bytes);

  // Two caches of 3 blocks per K and V per layer; the page goes to block 1 of each.
  constexpr size_t kBlocks = 3;
  const size_t block_bytes = c.floats_per_block * element;
  const size_t cache_bytes = 2 * static_cast<size_t>(c.num_layers) * kBlocks * block_bytes;
  DeviceBuffer scattered = backend->allocate(cache_bytes);
  DeviceBuffer per_piece = backend->allocate(cache_bytes);
  const auto pieces_into = [&](DeviceBuffer& cache) {
    std::vector<HostPiece> pieces;
    for (size_t p = 0; p < 2 * static_cast<size_t>(c.num_layers); ++p) {
      pieces.push_back({cache.as<uint8_t>() + (p * kBlocks + 1) * block_bytes, c.page_offset + p * src_bytes,
                        src_bytes, c.dtype});
    }
    return pieces;
  };
  backend->scatter_to_device(slab, pieces_into(scattered));
  backend->scatter_to_device(pageable.data(), pieces_into(per_piece));
  const std::vector<uint8_t> got = download<uint8_t>(*backend, scattered, cache_bytes);
  const std::vector<uint8_t> want = download<uint8_t>(*backend, per_piece, cache_bytes);
  ASSERT_EQ(got.size(), want.size());
  size_t mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i) mismatches += got[i] != want[i];
  EXPECT_EQ(mismatches, 0u);
  // The oracle itself: the first piece's first element as core/dtype.h rounds it.
  const uint8_t* first = want.data() + block_bytes;
  if (c.dtype == DType::kBF16) {
    uint16_t bits = 0;
    std::memcpy(&bits, first, sizeof(bits));
    EXPECT_EQ(bits, f32_to_bf16(values[0]));
  } else {
    EXPECT_EQ(std::memcmp(first, values.data(), sizeof(float)), 0);
  }
  pool->give_back(slab);
}

TEST(CudaKvScatter, OneLaunchMatchesThePerPiecePathByteForByte) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    check_case({1, 64, dtype, 0});
    check_case({3, 16 * 128, dtype, 0});      // 16 tokens x one 128-wide head
    check_case({32, 16 * 1024, dtype, 0});    // a Llama-3-8B page: 64 pieces of 16 x 1024
    check_case({50, 16 * 512, dtype, 0});     // more pieces than one launch takes
    check_case({4, 16 * 128 + 3, dtype, 4});  // words not in 16-byte groups
  }
}

// A page scattered behind queued device work, its slab given back, taken again at once and
// overwritten: the cache must still receive the first contents.
TEST(CudaKvScatter, ASlabFreedDuringItsScatterIsNotReusedUntilTheScatterEnded) {
  auto backend = cuda_backend();
  constexpr size_t kFloats = size_t{4} << 20;
  constexpr size_t kBytes = kFloats * sizeof(float);
  std::shared_ptr<HostSlabPool> pool = backend->make_pinned_pool(kBytes, kBytes);
  ASSERT_EQ(pool->num_slabs(), 1u);
  DeviceBuffer busy = backend->allocate(size_t{1} << 30);
  DeviceBuffer busy_copy = backend->allocate(size_t{1} << 30);
  DeviceBuffer dst = backend->allocate(kBytes);
  auto* slab = static_cast<float*>(pool->take(kBytes));
  ASSERT_NE(slab, nullptr);
  for (size_t i = 0; i < kFloats; ++i) slab[i] = static_cast<float>(i % 1000);
  for (int k = 0; k < 4; ++k) backend->copy_on_device(busy_copy.data(), busy.data(), busy.size_bytes());
  backend->scatter_to_device(reinterpret_cast<const uint8_t*>(slab), {{dst.data(), 0, kBytes, DType::kF32}});
  pool->give_back(slab);
  auto* again = static_cast<float*>(pool->take(kBytes));
  ASSERT_EQ(again, slab);
  std::memset(again, 0xEE, kBytes);
  const std::vector<float> got = download<float>(*backend, dst, kFloats);
  for (size_t i = 0; i < kFloats; i += 4099) ASSERT_EQ(got[i], static_cast<float>(i % 1000)) << i;
  pool->give_back(again);
}

}  // namespace
}  // namespace deepinfer::testing
