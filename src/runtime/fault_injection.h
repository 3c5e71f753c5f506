// A test hook: a backend wrapper that makes one chosen call fail, so tests can check that a failed
// step ends only its own requests, that a lost device turns the server unhealthy, and that
// shutdown ends a stuck engine. make_backend installs it when the environment sets
//   DEEPINFER_FAULT=KIND:OP:N    the N-th call (from 1) of the Backend method OP fails, once
// with KIND one of: throw (std::runtime_error: a host-side op failing), bad_alloc (an allocation
// failing), device_lost (DeviceError with lost(): a CUDA error that poisons the context), hang
// (the call never returns: a stuck step). embedding runs once per forward pass, so
// DEEPINFER_FAULT=throw:embedding:2 fails the second step that runs the model.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "core/result.h"
#include "runtime/backend.h"

namespace deepinfer {

enum class FaultKind : uint8_t { kThrow, kBadAlloc, kDeviceLost, kHang };

struct FaultSpec {
  FaultKind kind = FaultKind::kThrow;
  std::string op;    // a Backend method's name: "embedding", "allocate", "matmul", ...
  int64_t call = 1;  // the call of op, counted from arm(), that fails
};

// Parses KIND:OP:N; errors name DEEPINFER_FAULT and the form it takes.
Result<FaultSpec> parse_fault_spec(std::string_view text);

// Which call fails. Thread-safe.
class FaultSwitch {
 public:
  // Counts calls of spec.op from now on; replaces an earlier spec.
  void arm(const FaultSpec& spec);
  // Called before every backend call: fails (throws, or never returns) when it is the armed one.
  void on_call(std::string_view op);

 private:
  std::mutex mutex_;
  bool armed_ = false;
  FaultSpec spec_;
  int64_t num_calls_ = 0;
};

// inner with every call passing through faults.on_call(method name) first. Owns inner.
std::unique_ptr<Backend> wrap_with_faults(std::unique_ptr<Backend> inner, std::shared_ptr<FaultSwitch> faults);

}  // namespace deepinfer
