// CudaBackend::make_device_exchange: the ranks settle on NCCL or host copies together.
#include <string>

#include "core/logging.h"
#include "runtime/cuda/cuda_backend_impl.h"
#include "runtime/cuda/nccl_exchange.h"

namespace deepinfer {
namespace {

// Why the group cannot use NCCL, from every rank's "PCI bus id|nccl error" (empty error: NCCL
// loaded); empty when it can. NCCL refuses two ranks on one GPU.
std::string why_not_nccl(const std::vector<std::string>& ranks) {
  for (size_t r = 0; r < ranks.size(); ++r) {
    const std::string bus = ranks[r].substr(0, ranks[r].find('|'));
    const std::string error = ranks[r].substr(ranks[r].find('|') + 1);
    if (!error.empty()) {
      std::string message = "rank ";
      message.append(std::to_string(r)).append(": ").append(error);
      return message;
    }
    for (size_t other = 0; other < r; ++other) {
      if (ranks[other].substr(0, ranks[other].find('|')) == bus) {
        std::string message = "ranks ";
        message.append(std::to_string(other))
            .append(" and ")
            .append(std::to_string(r))
            .append(" share the GPU at ")
            .append(bus)
            .append(" (NCCL needs one GPU per rank; CUDA_VISIBLE_DEVICES picks each rank's)");
        return message;
      }
    }
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<DeviceExchange>> CudaBackend::make_device_exchange(std::shared_ptr<Communicator> group,
                                                                          ExchangeTransport transport) {
  if (transport == ExchangeTransport::kHost) return make_staged_exchange(std::move(group), *this);
  int device = 0;
  DI_CUDA_CHECK(cudaGetDevice(&device));
  char bus[32] = {};
  DI_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus), device));
  const Result<void> nccl = nccl_available();
  std::string own = bus;
  own.append("|").append(nccl.ok() ? "" : nccl.error().message);
  const std::string why_not = why_not_nccl(group->all_gather(own));
  if (!why_not.empty()) {
    if (transport == ExchangeTransport::kNccl) return Error{"expert-parallel transport nccl: " + why_not};
    DI_LOG(kInfo, "expert-parallel rows go through host copies: " << why_not);
    return make_staged_exchange(std::move(group), *this);
  }
  return make_nccl_exchange(std::move(group), [this] { return stream_.for_op(); });
}

}  // namespace deepinfer
