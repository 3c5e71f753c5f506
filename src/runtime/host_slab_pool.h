// HostSlabPool: one region of host memory carved into equal slabs, handed out and taken back
// without touching the system allocator. A device backend makes one over page-locked memory
// (Backend::make_pinned_pool) so the KV store's page images can be DMAed straight to and from
// the device; the region is allocated once because freeing page-locked memory waits for the device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

namespace deepinfer {

class HostSlabPool {
 public:
  // base: the region (owned by the subclass or the caller; it must outlive the pool), carved
  // into slabs of slab_bytes rounded up to kSlabAlign.
  HostSlabPool(void* base, size_t region_bytes, size_t slab_bytes);
  virtual ~HostSlabPool() = default;
  HostSlabPool(const HostSlabPool&) = delete;
  HostSlabPool& operator=(const HostSlabPool&) = delete;

  // A free slab of at least bytes; nullptr when bytes exceeds the slab size or every slab is taken
  // (the caller then uses ordinary memory). May wait for a device copy that still reads the slab
  // (wait_reusable). Thread-safe.
  void* take(size_t bytes);
  // Returns a slab from take (its start address). Thread-safe; never waits.
  void give_back(void* slab);
  // Whether [p, p + bytes) lies inside one slab of this pool.
  bool owns(const void* p, size_t bytes = 1) const;
  // Index of the slab holding p (owns(p) must hold).
  size_t slab_of(const void* p) const;

  size_t slab_bytes() const { return slab_bytes_; }
  size_t num_slabs() const { return num_slabs_; }
  size_t num_free() const;
  const void* base() const { return base_; }

  static constexpr size_t kSlabAlign = 256;

 protected:
  // Called by take, outside the pool's lock, before a slab is handed out again: a device pool
  // waits there for the last DMA that read the slab.
  virtual void wait_reusable(size_t /*slab*/) {}

 private:
  uint8_t* base_;
  size_t slab_bytes_;
  size_t num_slabs_;
  mutable std::mutex mutex_;
  // Slab indices, handed out oldest-returned first: a slab's last DMA has then most likely ended,
  // so take rarely waits.
  std::deque<size_t> free_;
  std::vector<bool> taken_;
};

}  // namespace deepinfer
