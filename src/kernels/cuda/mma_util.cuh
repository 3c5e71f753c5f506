// Warp-level tensor-core pieces shared by the mma.sync kernels (the attention kernels,
// moe_mma_stream.cu): bf16 / f16 packing, ldmatrix loads from shared memory, the m16n8k16 products.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace deepinfer::kernels::cuda {

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);  // lo in the low half
  return *reinterpret_cast<const uint32_t*>(&pair);
}

__device__ __forceinline__ uint32_t pack_f16(float lo, float hi) {
  const __half2 pair = __floats2half2_rn(lo, hi);  // lo in the low half
  return *reinterpret_cast<const uint32_t*>(&pair);
}

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8x8 bf16 matrices; lanes 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

// c[16x8] += a[16x16] b[16x8]; fragments as in the PTX ISA's m16n8k16 layouts. mma_bf16 takes bf16
// a and b, mma_f16 f16 ones: one instruction spelled with either type.
#define DEEPINFER_MMA_M16N8K16(name, ab)                                                                     \
  __device__ __forceinline__ void name(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {    \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." ab "." ab                                          \
                 ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"                     \
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                            \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));                            \
  }
DEEPINFER_MMA_M16N8K16(mma_bf16, "bf16")
DEEPINFER_MMA_M16N8K16(mma_f16, "f16")
#undef DEEPINFER_MMA_M16N8K16

}  // namespace deepinfer::kernels::cuda
