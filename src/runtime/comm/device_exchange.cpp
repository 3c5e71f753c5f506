// The exchanges through host memory: on the buffers themselves, or staged through host copies.
#include "runtime/comm/device_exchange.h"

#include <nlohmann/json.hpp>
#include <numeric>
#include <string>

#include "core/logging.h"
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

Result<ExchangePayload> parse_exchange_payload(std::string_view name, bool batch_invariant) {
  if (name == "auto") name = batch_invariant ? "float32" : "bf16";
  if (name == "float32") return ExchangePayload{DType::kF32, DType::kF32};
  if (name == "bf16") return ExchangePayload{DType::kBF16, DType::kBF16};
  if (name == "fp8") return ExchangePayload{DType::kF8E4M3, DType::kBF16};
  std::string message = "unknown expert-parallel payload '";
  message.append(name).append("' (expected auto, float32, bf16 or fp8)");
  return Error{message};
}

std::string_view exchange_payload_name(const ExchangePayload& payload) {
  if (payload.dispatch == DType::kF8E4M3) return "fp8";
  return payload.dispatch == DType::kBF16 ? "bf16" : "float32";
}

std::string_view exchange_transport_name(ExchangeTransport transport) {
  switch (transport) {
    case ExchangeTransport::kAuto:
      return "auto";
    case ExchangeTransport::kHost:
      return "host";
    case ExchangeTransport::kNccl:
      return "nccl";
  }
  return "unknown";
}

Result<ExchangeTransport> agree_on_transport(Communicator& group, const ExchangeEndpoint& own) {
  const nlohmann::json mine = {{"backend", own.backend},
                               {"requested", exchange_transport_name(own.requested)},
                               {"device", own.device},
                               {"nccl_unavailable", own.nccl_unavailable}};
  const std::vector<std::string> gathered = group.all_gather(mine.dump());
  std::vector<nlohmann::json> ranks;
  for (const std::string& text : gathered) ranks.push_back(nlohmann::json::parse(text));
  const auto describe = [&](size_t r) {
    std::string text = "rank ";
    text.append(std::to_string(r))
        .append(" runs ")
        .append(ranks[r]["backend"].get<std::string>())
        .append(" with expert-parallel transport ")
        .append(ranks[r]["requested"].get<std::string>());
    return text;
  };
  for (size_t r = 1; r < ranks.size(); ++r) {
    if (ranks[r]["backend"] != ranks[0]["backend"] || ranks[r]["requested"] != ranks[0]["requested"]) {
      return Error{"the ranks disagree: " + describe(0) + ", " + describe(r)};
    }
  }
  // Every rank asked for own.requested (checked above).
  if (own.requested == ExchangeTransport::kHost) return ExchangeTransport::kHost;
  // Why the group cannot use NCCL: a rank that cannot run it, or two ranks on one GPU (NCCL
  // refuses that); empty when it can.
  const auto why_not_nccl = [&]() {
    std::string why;
    for (size_t r = 0; r < ranks.size(); ++r) {
      const std::string unavailable = ranks[r]["nccl_unavailable"].get<std::string>();
      if (!unavailable.empty()) return why.append("rank ").append(std::to_string(r)).append(": ").append(unavailable);
      for (size_t other = 0; other < r; ++other) {
        if (ranks[other]["device"] != ranks[r]["device"]) continue;
        return why.append("ranks ")
            .append(std::to_string(other))
            .append(" and ")
            .append(std::to_string(r))
            .append(" share the GPU ")
            .append(ranks[r]["device"].get<std::string>())
            .append(" (NCCL needs one GPU per rank; CUDA_VISIBLE_DEVICES picks each rank's)");
      }
    }
    return why;
  };
  const std::string why_not = why_not_nccl();
  if (why_not.empty()) return ExchangeTransport::kNccl;
  if (own.requested == ExchangeTransport::kNccl) return Error{"expert-parallel transport nccl: " + why_not};
  DI_LOG(kInfo, "expert-parallel rows go through host memory: " << why_not);
  return ExchangeTransport::kHost;
}

std::unique_ptr<DeviceExchange> make_host_exchange(std::shared_ptr<Communicator> group) {
  return std::make_unique<HostExchange>(std::move(group));
}

std::unique_ptr<DeviceExchange> make_staged_exchange(std::shared_ptr<Communicator> group, Backend& backend) {
  return std::make_unique<StagedExchange>(std::move(group), backend);
}

}  // namespace deepinfer
