// Expert-parallel rows between GPUs through NCCL (grouped sends and receives on the backend's
// stream). NCCL is opened at run time ("libnccl.so.2"), so nothing links it and a machine without
// it still runs the host transport.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <memory>

#include "core/result.h"
#include "runtime/comm/device_exchange.h"

namespace deepinfer {

// Whether this process can use NCCL; the error says why not (a build without nccl.h, or the
// library not found).
Result<void> nccl_available();

// Joins the group's ranks in an NCCL communicator on this thread's current GPU: a collective over
// group (rank 0's NCCL id travels through it); every rank needs a GPU of its own. Before returning,
// every rank sends one value to every other and checks what arrives, which makes NCCL's
// connections while all ranks are alive; a failure on any rank is the same error on all of them.
// The exchange enqueues on the stream stream_for() returns and waits for it, polling NCCL's error
// state, so a rank that is gone ends the call with DeviceError(lost = true) within the group's
// timeout. The communicator is non-blocking, so joining it and every later call are bounded by the
// group's timeout too (a rank that never joins ends the others' joins with an error).
Result<std::unique_ptr<DeviceExchange>> make_nccl_exchange(std::shared_ptr<Communicator> group,
                                                           std::function<cudaStream_t()> stream_for);

}  // namespace deepinfer
