// CudaBackend's host<->device copies: straight DMA for memory in one of its pinned pools (the KV
// store's page images), the double-buffered staging path for everything else.
#include <algorithm>

#include "core/logging.h"
#include "runtime/cuda/cuda_backend_impl.h"

namespace deepinfer {

std::shared_ptr<HostSlabPool> CudaBackend::make_pinned_pool(size_t region_bytes, size_t slab_bytes) {
  std::shared_ptr<PinnedPool> pool;
  try {
    pool = PinnedPool::create(region_bytes, slab_bytes, [this](const PinnedPool* gone) {
      std::lock_guard lock(pinned_mutex_);
      std::erase(pinned_pools_, gone);
    });
  } catch (const kc::CudaError& error) {
    // Too much page-locked memory asked for: the store then keeps ordinary memory (staged copies).
    (void)cudaGetLastError();
    DI_LOG(kWarn, "cannot pin " << region_bytes << " bytes of host memory for the KV store (" << error.what()
                                << "); using ordinary memory");
    return nullptr;
  }
  std::lock_guard lock(pinned_mutex_);
  pinned_pools_.push_back(pool.get());
  return pool;
}

PinnedPool* CudaBackend::pinned_pool_of(const void* p, size_t size_bytes) {
  std::lock_guard lock(pinned_mutex_);
  for (PinnedPool* pool : pinned_pools_) {
    if (pool->owns(p, size_bytes)) return pool;
  }
  return nullptr;
}

void CudaBackend::copy_to_device(void* dst, const void* src, size_t size_bytes) {
  DI_CHECK(!capturing_, "copy_to_device during graph capture");
  if (size_bytes == 0) return;
  if (PinnedPool* pool = pinned_pool_of(src, size_bytes)) {
    DI_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_bytes, cudaMemcpyHostToDevice, stream_.for_op()));
    pool->record_read(src, stream_.for_op());
    return;
  }
  upload(dst, src, size_bytes);
}

void CudaBackend::scatter_to_device(const uint8_t* src, const std::vector<HostPiece>& pieces) {
  DI_CHECK(!capturing_, "scatter_to_device during graph capture");
  size_t end = 0;
  for (const HostPiece& piece : pieces) end = std::max(end, piece.src_offset + piece.src_bytes);
  PinnedPool* pool = end == 0 ? nullptr : pinned_pool_of(src, end);
  // The kernel moves whole 4-byte words (a bf16 page's pieces are an even count of elements
  // whenever block_size * kv_dim is); anything else takes the per-piece copies.
  const bool words = std::all_of(pieces.begin(), pieces.end(), [](const HostPiece& piece) {
    return piece.src_offset % sizeof(float) == 0 && piece.src_bytes % sizeof(float) == 0;
  });
  if (pool == nullptr || !words) {
    Backend::scatter_to_device(src, pieces);
    return;
  }
  const uint8_t* device_src = pool->device_view(src);
  std::vector<kc::CopyPiece> scatter;
  scatter.reserve(pieces.size());
  for (const HostPiece& piece : pieces) {
    const bool round = piece.src_dtype != piece.dst_dtype;
    DI_CHECK(!round || (piece.src_dtype == DType::kF32 && piece.dst_dtype == DType::kBF16),
             "page piece " << dtype_name(piece.src_dtype) << " into a " << dtype_name(piece.dst_dtype) << " cache");
    scatter.push_back({device_src + piece.src_offset, piece.dst, piece.src_bytes / sizeof(float), round});
  }
  kc::copy_pieces(scatter, stream_.for_op());
  pool->record_read(src, stream_.for_op());
}

void CudaBackend::copy_to_host(void* dst, const void* src, size_t size_bytes) {
  DI_CHECK(!capturing_, "copy_to_host during graph capture");
  if (size_bytes == 0) return;
  if (pinned_pool_of(dst, size_bytes) != nullptr) {
    DI_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_bytes, cudaMemcpyDeviceToHost, stream_.for_op()));
    DI_CUDA_CHECK(cudaStreamSynchronize(stream_.for_op()));
    return;
  }
  staging_->to_host(dst, src, size_bytes);
}

}  // namespace deepinfer
