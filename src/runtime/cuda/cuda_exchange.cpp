// CudaBackend::make_device_exchange: the ranks settle on NCCL or host copies together.
#include <unistd.h>

#include <string>

#include "core/logging.h"
#include "runtime/cuda/cuda_backend_impl.h"
#include "runtime/cuda/nccl_exchange.h"

namespace deepinfer {
namespace {

// This rank's GPU as "host:PCI bus id", or why it cannot be named (then NCCL is not offered).
Result<std::string> gpu_identity() {
  int device = 0;
  char bus[32] = {};
  cudaError_t status = cudaGetDevice(&device);
  if (status == cudaSuccess) status = cudaDeviceGetPCIBusId(bus, sizeof(bus), device);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return Error{std::string("cannot name this rank's GPU: ") + cudaGetErrorString(status)};
  }
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) return Error{"cannot name this rank's machine (gethostname)"};
  std::string identity = host;
  identity.append(":").append(bus);
  return identity;
}

}  // namespace

Result<std::unique_ptr<DeviceExchange>> CudaBackend::make_device_exchange(std::shared_ptr<Communicator> group,
                                                                          ExchangeTransport transport) {
  const Result<std::string> gpu = gpu_identity();
  const Result<void> nccl = nccl_available();
  const std::string nccl_unavailable = !gpu.ok()    ? gpu.error().message
                                       : !nccl.ok() ? nccl.error().message
                                                    : std::string();
  auto agreed = agree_on_transport(*group, {.backend = std::string(name()),
                                            .requested = transport,
                                            .device = gpu.ok() ? *gpu : std::string(),
                                            .nccl_unavailable = nccl_unavailable});
  if (!agreed.ok()) return agreed.error();
  if (*agreed == ExchangeTransport::kHost) return make_staged_exchange(std::move(group), *this);
  auto exchange = make_nccl_exchange(group, [this] { return stream_.for_op(); });
  if (exchange.ok() || transport == ExchangeTransport::kNccl) return exchange;
  // Every rank saw the same failure (make_nccl_exchange agrees on it), so all fall back together.
  DI_LOG(kWarn, "expert-parallel rows go through host memory: " << exchange.error().message);
  return make_staged_exchange(std::move(group), *this);
}

}  // namespace deepinfer
