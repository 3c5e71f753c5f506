// NCCL loaded with dlopen, and the exchange on it.
#include "runtime/cuda/nccl_exchange.h"

#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

#include "core/check.h"
#include "core/device_error.h"
#include "kernels/cuda/cuda_check.h"

#ifdef DEEPINFER_HAS_NCCL
#include <dlfcn.h>
#include <nccl.h>

#include <chrono>
#include <thread>
#endif

namespace deepinfer {

#ifndef DEEPINFER_HAS_NCCL

Result<void> nccl_available() { return Error{"this build has no NCCL (nccl.h was not found when it was built)"}; }

Result<std::unique_ptr<DeviceExchange>> make_nccl_exchange(std::shared_ptr<Communicator> /*group*/,
                                                           std::function<cudaStream_t()> /*stream_for*/) {
  return nccl_available().error();
}

#else

namespace {

// The NCCL entry points the exchange calls, resolved from the shared library.
struct NcclLibrary {
  decltype(&::ncclGetVersion) get_version = nullptr;
  decltype(&::ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&::ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&::ncclCommDestroy) comm_destroy = nullptr;
  decltype(&::ncclCommAbort) comm_abort = nullptr;
  decltype(&::ncclCommGetAsyncError) comm_get_async_error = nullptr;
  decltype(&::ncclGroupStart) group_start = nullptr;
  decltype(&::ncclGroupEnd) group_end = nullptr;
  decltype(&::ncclSend) send = nullptr;
  decltype(&::ncclRecv) recv = nullptr;
  decltype(&::ncclGetErrorString) error_string = nullptr;
};

// Opened once per process; the library stays loaded until exit.
const Result<const NcclLibrary*>& nccl_library() {
  static const Result<const NcclLibrary*> library = []() -> Result<const NcclLibrary*> {
    void* handle = ::dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = ::dlerror();
      std::string message = "cannot load NCCL (libnccl.so.2): ";
      message.append(why != nullptr ? why : "not found");
      return Error{message};
    }
    static NcclLibrary nccl;
    std::string missing;
    const auto resolve = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(handle, symbol));
      if (fn == nullptr) missing.append(missing.empty() ? "" : ", ").append(symbol);
    };
    resolve(nccl.get_version, "ncclGetVersion");
    resolve(nccl.get_unique_id, "ncclGetUniqueId");
    resolve(nccl.comm_init_rank, "ncclCommInitRank");
    resolve(nccl.comm_destroy, "ncclCommDestroy");
    resolve(nccl.comm_abort, "ncclCommAbort");
    resolve(nccl.comm_get_async_error, "ncclCommGetAsyncError");
    resolve(nccl.group_start, "ncclGroupStart");
    resolve(nccl.group_end, "ncclGroupEnd");
    resolve(nccl.send, "ncclSend");
    resolve(nccl.recv, "ncclRecv");
    resolve(nccl.error_string, "ncclGetErrorString");
    if (!missing.empty()) return Error{"libnccl.so.2 lacks " + missing + " (NCCL 2.7 or newer is needed)"};
    return &nccl;
  }();
  return library;
}

class NcclExchange final : public DeviceExchange {
 public:
  NcclExchange(const NcclLibrary& nccl, std::shared_ptr<Communicator> group, ncclComm_t comm,
               std::function<cudaStream_t()> stream_for)
      : nccl_(nccl), group_(std::move(group)), comm_(comm), stream_for_(std::move(stream_for)) {
    DI_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  }
  ~NcclExchange() override {
    if (!aborted_) nccl_.comm_destroy(comm_);
    cudaEventDestroy(done_);
  }

  std::string_view transport() const override { return "nccl"; }

  void all_to_all_v(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                    const std::vector<int64_t>& recv_counts, size_t elem_bytes) override {
    if (aborted_) fail("all_to_all_v", "the exchange was aborted after an earlier failure");
    const int32_t world = group_->world_size();
    const int32_t self = group_->rank();
    const cudaStream_t stream = stream_for_();
    const auto* send_bytes = static_cast<const char*>(send);
    auto* recv_bytes = static_cast<char*>(recv);
    std::vector<size_t> send_offset(static_cast<size_t>(world) + 1, 0), recv_offset(static_cast<size_t>(world) + 1, 0);
    for (size_t r = 0; r < static_cast<size_t>(world); ++r) {
      send_offset[r + 1] = send_offset[r] + static_cast<size_t>(send_counts[r]) * elem_bytes;
      recv_offset[r + 1] = recv_offset[r] + static_cast<size_t>(recv_counts[r]) * elem_bytes;
    }
    // This rank's own rows are a device copy, not a message.
    const auto own = static_cast<size_t>(self);
    const size_t own_bytes = send_offset[own + 1] - send_offset[own];
    DI_CHECK(own_bytes == recv_offset[own + 1] - recv_offset[own], "all_to_all_v: this rank's own counts differ");
    if (own_bytes > 0) {
      DI_CUDA_CHECK(cudaMemcpyAsync(recv_bytes + recv_offset[own], send_bytes + send_offset[own], own_bytes,
                                    cudaMemcpyDeviceToDevice, stream));
    }
    check(nccl_.group_start(), "ncclGroupStart");
    for (int32_t peer = 0; peer < world; ++peer) {
      if (peer == self) continue;
      const auto p = static_cast<size_t>(peer);
      if (send_offset[p + 1] > send_offset[p]) {
        check(nccl_.send(send_bytes + send_offset[p], send_offset[p + 1] - send_offset[p], ncclUint8, peer, comm_,
                         stream),
              "ncclSend");
      }
      if (recv_offset[p + 1] > recv_offset[p]) {
        check(nccl_.recv(recv_bytes + recv_offset[p], recv_offset[p + 1] - recv_offset[p], ncclUint8, peer, comm_,
                         stream),
              "ncclRecv");
      }
    }
    check(nccl_.group_end(), "ncclGroupEnd");
    wait(stream);
  }

 private:
  // Waits for the exchange without blocking in the driver: a peer that died leaves the transfer
  // pending forever, so NCCL's error state and the group's timeout are polled instead.
  void wait(cudaStream_t stream) {
    DI_CUDA_CHECK(cudaEventRecord(done_, stream));
    const auto deadline = std::chrono::steady_clock::now() + group_->timeout();
    for (;;) {
      const cudaError_t state = cudaEventQuery(done_);
      if (state == cudaSuccess) return;
      if (state != cudaErrorNotReady) DI_CUDA_CHECK(state);
      ncclResult_t async = ncclSuccess;
      check(nccl_.comm_get_async_error(comm_, &async), "ncclCommGetAsyncError");
      if (async != ncclSuccess) fail("all_to_all_v", nccl_.error_string(async));
      if (std::chrono::steady_clock::now() > deadline) {
        fail("all_to_all_v", "no answer within the group's timeout (a rank exited or stopped answering)");
      }
      std::this_thread::yield();
    }
  }

  void check(ncclResult_t result, const char* call) {
    if (result != ncclSuccess) fail(call, nccl_.error_string(result));
  }

  // The communicator cannot be trusted after an error: it is aborted, and the group with it.
  [[noreturn]] void fail(const char* what, const char* why) {
    if (!aborted_) nccl_.comm_abort(comm_);
    aborted_ = true;
    std::string message = "data-parallel group: rank ";
    message.append(std::to_string(group_->rank()))
        .append(" of ")
        .append(std::to_string(group_->world_size()))
        .append(" lost the NCCL exchange in ")
        .append(what)
        .append(": ")
        .append(why);
    throw DeviceError(message, /*lost=*/true);
  }

  const NcclLibrary& nccl_;
  std::shared_ptr<Communicator> group_;
  ncclComm_t comm_;
  std::function<cudaStream_t()> stream_for_;
  cudaEvent_t done_ = nullptr;
  bool aborted_ = false;
};

}  // namespace

Result<void> nccl_available() {
  const auto& library = nccl_library();
  if (!library.ok()) return library.error();
  return {};
}

Result<std::unique_ptr<DeviceExchange>> make_nccl_exchange(std::shared_ptr<Communicator> group,
                                                           std::function<cudaStream_t()> stream_for) {
  const auto& library = nccl_library();
  if (!library.ok()) return library.error();
  const NcclLibrary& nccl = **library;
  ncclUniqueId id{};
  if (group->rank() == 0) {
    if (const ncclResult_t made = nccl.get_unique_id(&id); made != ncclSuccess) {
      // Rank 0 still takes part in the gather below, so the others learn of it instead of waiting.
      group->all_gather(std::string());
      return Error{std::string("ncclGetUniqueId: ") + nccl.error_string(made)};
    }
  }
  const std::string own(reinterpret_cast<const char*>(&id), group->rank() == 0 ? sizeof(id) : 0);
  const std::vector<std::string> ids = group->all_gather(own);
  if (ids[0].size() != sizeof(id)) {
    return Error{"NCCL: rank 0 could not make the communicator's id (its error is above)"};
  }
  std::memcpy(&id, ids[0].data(), sizeof(id));
  ncclComm_t comm = nullptr;
  if (const ncclResult_t joined = nccl.comm_init_rank(&comm, group->world_size(), id, group->rank());
      joined != ncclSuccess) {
    std::string message = "ncclCommInitRank (rank ";
    message.append(std::to_string(group->rank()))
        .append(" of ")
        .append(std::to_string(group->world_size()))
        .append("): ")
        .append(nccl.error_string(joined));
    return Error{message};
  }
  return std::unique_ptr<DeviceExchange>(
      std::make_unique<NcclExchange>(nccl, std::move(group), comm, std::move(stream_for)));
}

#endif

}  // namespace deepinfer
