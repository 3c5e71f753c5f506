// NCCL loaded with dlopen, and the exchange on it.
#include "runtime/cuda/nccl_exchange.h"

#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

#include "core/check.h"
#include "core/device_error.h"
#include "core/logging.h"

#ifdef DEEPINFER_HAS_NCCL
#include <dlfcn.h>
#include <nccl.h>

#include <chrono>
#include <stdexcept>
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
  decltype(&::ncclCommInitRankConfig) comm_init_rank_config = nullptr;
  decltype(&::ncclCommFinalize) comm_finalize = nullptr;
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
    resolve(nccl.comm_init_rank_config, "ncclCommInitRankConfig");
    resolve(nccl.comm_finalize, "ncclCommFinalize");
    resolve(nccl.comm_destroy, "ncclCommDestroy");
    resolve(nccl.comm_abort, "ncclCommAbort");
    resolve(nccl.comm_get_async_error, "ncclCommGetAsyncError");
    resolve(nccl.group_start, "ncclGroupStart");
    resolve(nccl.group_end, "ncclGroupEnd");
    resolve(nccl.send, "ncclSend");
    resolve(nccl.recv, "ncclRecv");
    resolve(nccl.error_string, "ncclGetErrorString");
    if (!missing.empty()) return Error{"libnccl.so.2 lacks " + missing + " (NCCL 2.14 or newer is needed)"};
    return &nccl;
  }();
  return library;
}

// The group's failure as DeviceError(lost): "data-parallel group 'NAME': rank R of N lost the NCCL
// exchange in WHAT: WHY".
[[noreturn]] void throw_lost(const Communicator& group, const char* what, std::string_view why) {
  std::string message = "data-parallel group '";
  message.append(group.name())
      .append("': rank ")
      .append(std::to_string(group.rank()))
      .append(" of ")
      .append(std::to_string(group.world_size()))
      .append(" lost the NCCL exchange in ")
      .append(what)
      .append(": ")
      .append(why);
  throw DeviceError(message, /*lost=*/true);
}

// The communicators are non-blocking (ncclConfig_t::blocking = 0), so no NCCL call waits without a
// deadline of ours: a call may return ncclInProgress, and the communicator's state is polled until
// it is not. Returns that state, or ncclInProgress when deadline passed first.
ncclResult_t settle(const NcclLibrary& nccl, ncclComm_t comm, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t queried = nccl.comm_get_async_error(comm, &state);
    if (queried != ncclSuccess) return queried;
    if (state != ncclInProgress || std::chrono::steady_clock::now() > deadline) return state;
    std::this_thread::yield();
  }
}

bool accepted(ncclResult_t result) { return result == ncclSuccess || result == ncclInProgress; }

class NcclExchange final : public DeviceExchange {
 public:
  NcclExchange(const NcclLibrary& nccl, std::shared_ptr<Communicator> group, ncclComm_t comm,
               std::function<cudaStream_t()> stream_for)
      : nccl_(nccl), group_(std::move(group)), comm_(comm), stream_for_(std::move(stream_for)) {
    if (cudaEventCreateWithFlags(&done_, cudaEventDisableTiming) != cudaSuccess) {
      (void)cudaGetLastError();
      nccl_.comm_abort(comm_);
      aborted_ = true;
      throw_lost(*group_, "setup", "cudaEventCreateWithFlags failed");
    }
  }
  ~NcclExchange() override {
    if (!aborted_) {
      // Finalising flushes the communicator's work; a peer that is gone leaves it in progress,
      // and then it is aborted instead of destroyed.
      const bool flushed = accepted(nccl_.comm_finalize(comm_)) &&
                           settle(nccl_, comm_, std::chrono::steady_clock::now() + group_->timeout()) == ncclSuccess;
      if (flushed) {
        nccl_.comm_destroy(comm_);
      } else {
        nccl_.comm_abort(comm_);
      }
    }
    cudaEventDestroy(done_);
  }

  std::string_view transport() const override { return "nccl"; }

  void all_to_all_v(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                    const std::vector<int64_t>& recv_counts, size_t elem_bytes) override {
    // One deadline for the whole exchange: enqueueing it and waiting for it (and any left before).
    const auto deadline = std::chrono::steady_clock::now() + group_->timeout();
    enqueue(send, send_counts, recv, recv_counts, elem_bytes, deadline);
    record_done(stream_for_());
    wait_for_done(deadline);
    pending_ = false;
  }

  void enqueue_all_to_all_v(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                            const std::vector<int64_t>& recv_counts, size_t elem_bytes) override {
    enqueue(send, send_counts, recv, recv_counts, elem_bytes, std::chrono::steady_clock::now() + group_->timeout());
    // Marks the stream here, so the host's wait covers this exchange and not the work after it.
    record_done(stream_for_());
    pending_ = true;
  }

  void wait_enqueued() override {
    if (!pending_) return;
    // An earlier failure aborted (and freed) the communicator: nothing left to poll.
    if (aborted_) fail("all_to_all_v", "the exchange was aborted after an earlier failure");
    wait_for_done(std::chrono::steady_clock::now() + group_->timeout());
    pending_ = false;
  }

 private:
  // The exchange's sends and receives on the stream, within deadline.
  void enqueue(const void* send, const std::vector<int64_t>& send_counts, void* recv,
               const std::vector<int64_t>& recv_counts, size_t elem_bytes,
               std::chrono::steady_clock::time_point deadline) {
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
    if (own_bytes > 0 && cudaMemcpyAsync(recv_bytes + recv_offset[own], send_bytes + send_offset[own], own_bytes,
                                         cudaMemcpyDeviceToDevice, stream) != cudaSuccess) {
      (void)cudaGetLastError();
      fail("all_to_all_v", "the copy of this rank's own rows failed");
    }
    ncclResult_t result = nccl_.group_start();
    const char* failed = accepted(result) ? nullptr : "ncclGroupStart";
    for (int32_t peer = 0; peer < world && failed == nullptr; ++peer) {
      if (peer == self) continue;
      const auto p = static_cast<size_t>(peer);
      if (send_offset[p + 1] > send_offset[p]) {
        result = nccl_.send(send_bytes + send_offset[p], send_offset[p + 1] - send_offset[p], ncclUint8, peer, comm_,
                            stream);
        if (!accepted(result)) failed = "ncclSend";
      }
      if (failed == nullptr && recv_offset[p + 1] > recv_offset[p]) {
        result = nccl_.recv(recv_bytes + recv_offset[p], recv_offset[p + 1] - recv_offset[p], ncclUint8, peer, comm_,
                            stream);
        if (!accepted(result)) failed = "ncclRecv";
      }
    }
    // The group is closed whatever failed inside it, so this thread does not stay in it.
    const ncclResult_t ended = nccl_.group_end();
    if (failed != nullptr) fail(failed, nccl_.error_string(result));
    if (!accepted(ended)) fail("ncclGroupEnd", nccl_.error_string(ended));
    // The sends and receives are on the stream once the communicator leaves ncclInProgress.
    const ncclResult_t enqueued = settle(nccl_, comm_, deadline);
    if (enqueued == ncclInProgress) fail("ncclGroupEnd", "not enqueued within the group's timeout");
    if (enqueued != ncclSuccess) fail("ncclGroupEnd", nccl_.error_string(enqueued));
  }

  // done_ at the stream's current end.
  void record_done(cudaStream_t stream) {
    if (cudaEventRecord(done_, stream) != cudaSuccess) {
      (void)cudaGetLastError();
      fail("all_to_all_v", "cudaEventRecord failed");
    }
  }

  // Waits for done_ without blocking in the driver: a peer that died leaves the transfer pending
  // forever, so NCCL's error state and the group's timeout are polled instead.
  void wait_for_done(std::chrono::steady_clock::time_point deadline) {
    for (;;) {
      const cudaError_t state = cudaEventQuery(done_);
      if (state == cudaSuccess) return;
      (void)cudaGetLastError();  // not-ready must not be left for the next launch check to find
      if (state != cudaErrorNotReady) fail("all_to_all_v", cudaGetErrorString(state));
      ncclResult_t async = ncclSuccess;
      const ncclResult_t queried = nccl_.comm_get_async_error(comm_, &async);
      if (queried != ncclSuccess) fail("ncclCommGetAsyncError", nccl_.error_string(queried));
      if (!accepted(async)) fail("all_to_all_v", nccl_.error_string(async));
      if (std::chrono::steady_clock::now() > deadline) {
        fail("all_to_all_v", "no answer within the group's timeout (a rank exited or stopped answering)");
      }
      std::this_thread::yield();
    }
  }

  // The communicator cannot be trusted after an error: it is aborted, and the group with it.
  [[noreturn]] void fail(const char* what, std::string_view why) {
    if (!aborted_) nccl_.comm_abort(comm_);
    aborted_ = true;
    throw_lost(*group_, what, why);
  }

  const NcclLibrary& nccl_;
  std::shared_ptr<Communicator> group_;
  ncclComm_t comm_;
  std::function<cudaStream_t()> stream_for_;
  cudaEvent_t done_ = nullptr;
  bool aborted_ = false;
  bool pending_ = false;  // an exchange enqueued and not yet waited for
};

// One int from every rank to every other, checked on arrival: NCCL connects a pair of ranks at
// their first exchange, so this makes every connection while all ranks are known to be alive
// (later exchanges then only wait, and that wait is bounded), and shows the exchange works.
// Returns what went wrong on this rank; empty when nothing did.
std::string warm_up(DeviceExchange& exchange, const Communicator& group, cudaStream_t stream) {
  const auto world = static_cast<size_t>(group.world_size());
  std::vector<int32_t> sent(world, group.rank()), received(world, -1);
  void* device = nullptr;
  if (cudaMalloc(&device, 2 * world * sizeof(int32_t)) != cudaSuccess) {
    (void)cudaGetLastError();
    return "cudaMalloc of the warm-up buffers failed";
  }
  std::string problem;
  try {
    auto* send = static_cast<int32_t*>(device);
    int32_t* recv = send + world;
    const std::vector<int64_t> ones(world, 1);
    if (cudaMemcpyAsync(send, sent.data(), world * sizeof(int32_t), cudaMemcpyHostToDevice, stream) != cudaSuccess ||
        cudaStreamSynchronize(stream) != cudaSuccess) {
      throw std::runtime_error("the warm-up upload failed");
    }
    exchange.all_to_all_v(send, ones, recv, ones, sizeof(int32_t));
    if (cudaMemcpy(received.data(), recv, world * sizeof(int32_t), cudaMemcpyDeviceToHost) != cudaSuccess) {
      throw std::runtime_error("the warm-up readback failed");
    }
    for (size_t r = 0; r < world && problem.empty(); ++r) {
      if (received[r] != static_cast<int32_t>(r)) {
        problem.append("the warm-up exchange gave ")
            .append(std::to_string(received[r]))
            .append(" from rank ")
            .append(std::to_string(r));
      }
    }
  } catch (const std::exception& e) {
    (void)cudaGetLastError();
    problem = e.what();
  }
  cudaFree(device);
  return problem;
}

// The first rank's non-empty status, as "rank R: STATUS", or empty when every rank's is.
std::string first_problem(const std::vector<std::string>& statuses) {
  for (size_t r = 0; r < statuses.size(); ++r) {
    if (!statuses[r].empty()) {
      std::string problem = "rank ";
      problem.append(std::to_string(r)).append(": ").append(statuses[r]);
      return problem;
    }
  }
  return {};
}

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
  std::string made;
  if (group->rank() == 0) {
    if (const ncclResult_t result = nccl.get_unique_id(&id); result != ncclSuccess) {
      made = std::string("ncclGetUniqueId: ") + nccl.error_string(result);
    }
  }
  // Rank 0 sends the id, or its error, so that every rank gives up together.
  const std::string own = group->rank() != 0 ? std::string()
                          : made.empty()     ? std::string(reinterpret_cast<const char*>(&id), sizeof(id))
                                             : made;
  const std::vector<std::string> ids = group->all_gather(own);
  if (ids[0].size() != sizeof(id)) return Error{"NCCL: rank 0 could not make the communicator's id: " + ids[0]};
  std::memcpy(&id, ids[0].data(), sizeof(id));
  ncclComm_t comm = nullptr;
  std::string status;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t joined = nccl.comm_init_rank_config(&comm, group->world_size(), id, group->rank(), &config);
  if (accepted(joined) && comm != nullptr) {
    joined = settle(nccl, comm, std::chrono::steady_clock::now() + group->timeout());
  }
  if (joined != ncclSuccess) {
    status = joined == ncclInProgress ? "ncclCommInitRankConfig: not every rank joined within the group's timeout"
                                      : std::string("ncclCommInitRankConfig: ") + nccl.error_string(joined);
    if (comm != nullptr) nccl.comm_abort(comm);
    comm = nullptr;
  }
  std::string problem = first_problem(group->all_gather(status));
  if (!problem.empty()) {
    if (comm != nullptr) nccl.comm_abort(comm);
    return Error{"NCCL: " + problem};
  }
  std::unique_ptr<DeviceExchange> exchange;
  try {
    exchange = std::make_unique<NcclExchange>(nccl, group, comm, stream_for);
    status = warm_up(*exchange, *group, stream_for());
  } catch (const std::exception& e) {
    status = e.what();
  }
  problem = first_problem(group->all_gather(status));
  if (!problem.empty()) return Error{"NCCL: " + problem};
  int version = 0;
  if (nccl.get_version(&version) == ncclSuccess) {
    // NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch since NCCL 2.9.
    DI_LOG(kInfo, "expert-parallel rows go over NCCL " << version / 10000 << "." << version / 100 % 100 << "."
                                                       << version % 100 << " between " << group->world_size()
                                                       << " GPUs");
  }
  return exchange;
}

#endif

}  // namespace deepinfer
