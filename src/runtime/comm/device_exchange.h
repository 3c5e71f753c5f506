// DeviceExchange: the rows expert-parallel MoE layers send to the ranks that hold their experts,
// moved between buffers of a backend's own memory. Host backends hand their buffers to the group
// (Gloo); the CUDA backend moves device memory with NCCL, one GPU per rank, or stages it through
// host copies when ranks share a GPU or NCCL is missing (Backend::make_device_exchange).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/result.h"
#include "runtime/comm/communicator.h"

namespace deepinfer {

class Backend;  // runtime/backend.h

// --expert-parallel-transport: kAuto takes NCCL where every rank has a GPU of its own and NCCL
// loads, else host copies; kHost and kNccl insist (kNccl fails where it cannot run).
enum class ExchangeTransport : uint8_t { kAuto, kHost, kNccl };

// "auto", "host", "nccl"; the error names the value and the accepted ones.
Result<ExchangeTransport> parse_exchange_transport(std::string_view name);
std::string_view exchange_transport_name(ExchangeTransport transport);

// --expert-parallel-payload: the element types of the rows MoE layers send to their experts' ranks
// (dispatch) and get back (combine), in kernels/ops.h's row payload layout (kF32, kBF16, kF8E4M3).
struct ExchangePayload {
  DType dispatch = DType::kF32;
  DType combine = DType::kF32;
};

// "auto": float32 both ways with batch_invariant (the group then gives one device's bits), else
// bf16 both ways; "float32"; "bf16"; "fp8": e4m3 with a float32 scale per 128 values on dispatch,
// bf16 on combine (DeepSeek's choice). The error names the value and the accepted ones.
Result<ExchangePayload> parse_exchange_payload(std::string_view name, bool batch_invariant);
// "float32", "bf16" or "fp8", as parse_exchange_payload spells them.
std::string_view exchange_payload_name(const ExchangePayload& payload);

// What one rank brings to the choice of transport.
struct ExchangeEndpoint {
  std::string backend;  // Backend::name()
  ExchangeTransport requested = ExchangeTransport::kAuto;
  // The GPU the rank would exchange from, unique across machines (host name and PCI bus id);
  // empty for host memory.
  std::string device;
  std::string nccl_unavailable;  // why NCCL cannot run on this rank; empty: it can
};

// The transport the whole group takes (kHost or kNccl), from every rank's endpoint: a collective
// that every rank calls whatever it asked for, and whose answer (or error) is the same on every
// rank. Ranks that disagree on the backend or the transport asked for are an error naming them;
// kAuto takes NCCL where every rank has a GPU of its own and can run NCCL, else host copies
// (logged with the reason); kNccl where that fails is an error naming the ranks.
Result<ExchangeTransport> agree_on_transport(Communicator& group, const ExchangeEndpoint& own);

class DeviceExchange {
 public:
  virtual ~DeviceExchange() = default;
  // "host" (the group's host collectives) or "nccl".
  virtual std::string_view transport() const = 0;
  // Communicator::all_to_all_v's contract on buffers of the backend's memory. Every rank calls it;
  // a rank that is gone ends the call with DeviceError(lost = true) naming the group.
  virtual void all_to_all_v(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                            const std::vector<int64_t>& recv_counts, size_t elem_bytes) = 0;
  // all_to_all_v left on the backend's stream without a wait: recv holds the rows for the work
  // enqueued after the call. Transports that exchange through the host do the whole exchange here,
  // as all_to_all_v. Only wait_enqueued notices a rank that is gone, so the host calls it before
  // it waits on the stream for anything enqueued after this.
  virtual void enqueue_all_to_all_v(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                                    const std::vector<int64_t>& recv_counts, size_t elem_bytes) {
    all_to_all_v(send, send_counts, recv, recv_counts, elem_bytes);
  }
  // Waits, within the group's timeout, for every exchange enqueue_all_to_all_v left on the stream;
  // a rank that is gone ends it with DeviceError(lost = true). Returns at once when none is left.
  virtual void wait_enqueued() {}
};

// Buffers in host memory: the group's all_to_all_v on them as they are.
std::unique_ptr<DeviceExchange> make_host_exchange(std::shared_ptr<Communicator> group);
// Buffers in backend's memory, copied to the host, through the group and back.
std::unique_ptr<DeviceExchange> make_staged_exchange(std::shared_ptr<Communicator> group, Backend& backend);

}  // namespace deepinfer
