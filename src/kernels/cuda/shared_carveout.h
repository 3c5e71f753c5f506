// Shared-memory carveouts for kernels that run between a decode step's GEMVs. Left to the driver, a
// kernel with large shared memory gets the split that fits the most of its blocks; the SMs that ran
// it then give the GEMVs after it a small L1, which caps their loads in flight (measured on the H200:
// ~8 us per Llama-3-8B layer at batch 1; docs/benchmarks.md). Such a kernel, when its grid needs
// only one block per SM, is launched as a twin instantiation that asks for the least carveout.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace deepinfer::kernels::cuda {

// Sets kernel's preferred carveout to the smallest share of the SM's shared memory that holds
// blocks_per_sm of its blocks with dynamic_bytes each (plus its static shared memory and the
// per-block reserve). A preference: a launch needing more still gets it.
void prefer_least_shared_carveout(const void* kernel, size_t dynamic_bytes, int blocks_per_sm);

// The device's multiprocessor count (the current device's, read once).
int32_t multiprocessor_count();

}  // namespace deepinfer::kernels::cuda
