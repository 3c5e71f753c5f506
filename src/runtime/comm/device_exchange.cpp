// The exchanges through host memory: on the buffers themselves, or staged through host copies.
#include "runtime/comm/device_exchange.h"

#include <numeric>
#include <string>

#include "runtime/backend.h"

namespace deepinfer {
namespace {

class HostExchange final : public DeviceExchange {
 public:
  explicit HostExchange(std::shared_ptr<Communicator> group) : group_(std::move(group)) {}
  std::string_view transport() const override { return "host"; }
  void all_to_all_v(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                    const std::vector<int64_t>& recv_counts, size_t elem_bytes) override {
    group_->all_to_all_v(send, send_counts, recv, recv_counts, elem_bytes);
  }

 private:
  std::shared_ptr<Communicator> group_;
};

class StagedExchange final : public DeviceExchange {
 public:
  StagedExchange(std::shared_ptr<Communicator> group, Backend& backend) : group_(std::move(group)), backend_(backend) {}
  std::string_view transport() const override { return "host"; }
  void all_to_all_v(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                    const std::vector<int64_t>& recv_counts, size_t elem_bytes) override {
    const auto bytes = [elem_bytes](const std::vector<int64_t>& counts) {
      return static_cast<size_t>(std::accumulate(counts.begin(), counts.end(), int64_t{0})) * elem_bytes;
    };
    send_host_.resize(bytes(send_counts));
    recv_host_.resize(bytes(recv_counts));
    if (!send_host_.empty()) backend_.copy_to_host(send_host_.data(), send, send_host_.size());
    group_->all_to_all_v(send_host_.data(), send_counts, recv_host_.data(), recv_counts, elem_bytes);
    if (!recv_host_.empty()) backend_.copy_to_device(recv, recv_host_.data(), recv_host_.size());
  }

 private:
  std::shared_ptr<Communicator> group_;
  Backend& backend_;
  std::vector<char> send_host_, recv_host_;  // kept between calls: every MoE layer of every step comes here
};

}  // namespace

Result<ExchangeTransport> parse_exchange_transport(std::string_view name) {
  if (name == "auto") return ExchangeTransport::kAuto;
  if (name == "host") return ExchangeTransport::kHost;
  if (name == "nccl") return ExchangeTransport::kNccl;
  std::string message = "unknown expert-parallel transport '";
  message.append(name).append("' (expected auto, host or nccl)");
  return Error{message};
}

std::unique_ptr<DeviceExchange> make_host_exchange(std::shared_ptr<Communicator> group) {
  return std::make_unique<HostExchange>(std::move(group));
}

std::unique_ptr<DeviceExchange> make_staged_exchange(std::shared_ptr<Communicator> group, Backend& backend) {
  return std::make_unique<StagedExchange>(std::move(group), backend);
}

}  // namespace deepinfer
