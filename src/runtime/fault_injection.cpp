// The DEEPINFER_FAULT test hook: FaultSwitch and the backend wrapper that consults it.
#include "runtime/fault_injection.h"

#include <charconv>
#include <chrono>
#include <new>
#include <stdexcept>
#include <thread>

#include "core/device_error.h"
#include "runtime/forwarding_backend.h"

namespace deepinfer {
namespace {

class FaultyBackend final : public ForwardingBackend {
 public:
  FaultyBackend(std::unique_ptr<Backend> inner, std::shared_ptr<FaultSwitch> faults)
      : ForwardingBackend(std::move(inner)), faults_(std::move(faults)) {}

  void on_call(std::string_view op) override { faults_->on_call(op); }

 private:
  std::shared_ptr<FaultSwitch> faults_;
};

}  // namespace

Result<FaultSpec> parse_fault_spec(std::string_view text) {
  const Error usage{"DEEPINFER_FAULT='" + std::string(text) +
                    "': expected KIND:OP:N, KIND one of throw, bad_alloc, device_lost, hang; OP a backend method "
                    "(embedding, allocate, ...); N >= 1"};
  const size_t first = text.find(':');
  const size_t last = text.rfind(':');
  if (first == std::string_view::npos || first == last) return usage;
  const std::string_view kind = text.substr(0, first);
  FaultSpec spec;
  if (kind == "throw") {
    spec.kind = FaultKind::kThrow;
  } else if (kind == "bad_alloc") {
    spec.kind = FaultKind::kBadAlloc;
  } else if (kind == "device_lost") {
    spec.kind = FaultKind::kDeviceLost;
  } else if (kind == "hang") {
    spec.kind = FaultKind::kHang;
  } else {
    return usage;
  }
  spec.op = std::string(text.substr(first + 1, last - first - 1));
  const std::string_view count = text.substr(last + 1);
  const auto [end, error] = std::from_chars(count.data(), count.data() + count.size(), spec.call);
  if (spec.op.empty() || error != std::errc() || end != count.data() + count.size() || spec.call < 1) return usage;
  return spec;
}

void FaultSwitch::arm(const FaultSpec& spec) {
  std::lock_guard lock(mutex_);
  armed_ = true;
  spec_ = spec;
  num_calls_ = 0;
}

void FaultSwitch::on_call(std::string_view op) {
  FaultKind kind;
  std::string what;
  {
    std::lock_guard lock(mutex_);
    if (!armed_ || op != spec_.op || ++num_calls_ != spec_.call) return;
    armed_ = false;
    kind = spec_.kind;
    what = "injected fault (DEEPINFER_FAULT) in call " + std::to_string(spec_.call) + " of " + spec_.op;
  }
  switch (kind) {
    case FaultKind::kThrow: throw std::runtime_error(what);
    case FaultKind::kBadAlloc: throw std::bad_alloc();
    case FaultKind::kDeviceLost: throw DeviceError(what + ": the device is lost", true);
    case FaultKind::kHang:
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
}

std::unique_ptr<Backend> wrap_with_faults(std::unique_ptr<Backend> inner, std::shared_ptr<FaultSwitch> faults) {
  return std::make_unique<FaultyBackend>(std::move(inner), std::move(faults));
}

}  // namespace deepinfer
