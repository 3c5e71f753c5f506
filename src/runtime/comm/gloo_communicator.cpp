// The Communicator on Gloo: TCP pairs between every two ranks, found through a FileStore (a shared
// directory) or a RedisStore. Gloo throws on a closed connection or a timeout; both end the group.
#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/redis_store.h>
#include <gloo/transport/tcp/device.h>

#include <filesystem>
#include <numeric>
#include <string_view>

#include "core/device_error.h"
#include "runtime/comm/communicator.h"

namespace deepinfer {
namespace {

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::Context> context, std::string group_name)
      : context_(std::move(context)), group_name_(std::move(group_name)) {}

  int32_t rank() const override { return context_->rank; }
  int32_t world_size() const override { return context_->size; }
  std::chrono::milliseconds timeout() const override { return context_->getTimeout(); }
  const std::string& name() const override { return group_name_; }

  void all_to_all_v(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                    const std::vector<int64_t>& recv_counts, size_t elem_bytes) override {
    run("all_to_all_v", [&] {
      // Gloo wants byte counts of a char buffer and a buffer even when nothing moves.
      std::vector<int64_t> send_bytes(send_counts.size()), recv_bytes(recv_counts.size());
      for (size_t r = 0; r < send_counts.size(); ++r) send_bytes[r] = send_counts[r] * static_cast<int64_t>(elem_bytes);
      for (size_t r = 0; r < recv_counts.size(); ++r) recv_bytes[r] = recv_counts[r] * static_cast<int64_t>(elem_bytes);
      char empty = 0;
      auto* send_ptr = const_cast<char*>(static_cast<const char*>(send));  // Gloo's API is not const; it only reads
      auto* recv_ptr = static_cast<char*>(recv);
      if (std::accumulate(send_bytes.begin(), send_bytes.end(), int64_t{0}) == 0) send_ptr = &empty;
      if (std::accumulate(recv_bytes.begin(), recv_bytes.end(), int64_t{0}) == 0) recv_ptr = &empty;
      gloo::AlltoallvOptions options(context_);
      options.setInput(send_ptr, send_bytes);
      options.setOutput(recv_ptr, recv_bytes);
      options.setTag(next_tag());
      gloo::alltoallv(options);
    });
  }

  void all_reduce_max(std::vector<int64_t>& values) override {
    all_reduce("all_reduce_max", values, &gloo::max<int64_t>);
  }
  void all_reduce_sum(std::vector<int64_t>& values) override {
    all_reduce("all_reduce_sum", values, &gloo::sum<int64_t>);
  }

  std::vector<std::string> all_gather(const std::string& bytes) override {
    std::vector<std::string> out;
    run("all_gather", [&] {
      std::vector<int64_t> sizes(static_cast<size_t>(world_size()));
      int64_t own = static_cast<int64_t>(bytes.size());
      gloo::AllgatherOptions size_options(context_);
      size_options.setInput(&own, 1);
      size_options.setOutput(sizes.data(), sizes.size());
      size_options.setTag(next_tag());
      gloo::allgather(size_options);
      // One byte more from every rank, so no buffer is empty.
      std::vector<size_t> padded(sizes.size());
      for (size_t r = 0; r < sizes.size(); ++r) padded[r] = static_cast<size_t>(sizes[r]) + 1;
      std::string input = bytes + '\0';
      std::string all(std::accumulate(padded.begin(), padded.end(), size_t{0}), '\0');
      gloo::AllgathervOptions options(context_);
      options.setInput(input.data(), input.size());
      options.setOutput(all.data(), padded);
      options.setTag(next_tag());
      gloo::allgatherv(options);
      size_t offset = 0;
      for (size_t r = 0; r < sizes.size(); ++r) {
        out.emplace_back(all.substr(offset, static_cast<size_t>(sizes[r])));
        offset += padded[r];
      }
    });
    return out;
  }

 private:
  using ReduceFn = void (*)(void*, const void*, const void*, size_t);

  void all_reduce(const char* what, std::vector<int64_t>& values, ReduceFn fn) {
    if (values.empty()) return;
    run(what, [&] {
      gloo::AllreduceOptions options(context_);
      options.setOutput(values.data(), values.size());
      options.setReduceFunction(fn);
      options.setTag(next_tag());
      gloo::allreduce(options);
    });
  }

  template <typename Fn>
  void run(const char* what, Fn&& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      throw DeviceError("data-parallel group '" + group_name_ + "': rank " + std::to_string(rank()) + " of " +
                            std::to_string(world_size()) + " lost the group in " + what +
                            " (a rank exited or stopped answering): " + e.what(),
                        /*lost=*/true);
    }
  }

  uint32_t next_tag() { return tag_++; }

  std::shared_ptr<gloo::Context> context_;
  std::string group_name_;
  uint32_t tag_ = 0;
};

// "redis://HOST:PORT" -> (HOST, PORT); anything else is a directory.
Result<std::unique_ptr<gloo::rendezvous::Store>> open_store(const std::string& rendezvous) {
  constexpr std::string_view kRedis = "redis://";
  if (rendezvous.rfind(kRedis, 0) == 0) {
    const std::string address = rendezvous.substr(kRedis.size());
    const size_t colon = address.rfind(':');
    std::string host = address.substr(0, colon);
    int port = 6379;
    if (colon != std::string::npos) {
      try {
        port = std::stoi(address.substr(colon + 1));
      } catch (const std::exception&) {
        return Error{"rendezvous '" + rendezvous + "': the port is not a number (expected redis://HOST:PORT)"};
      }
    }
    try {
      return std::unique_ptr<gloo::rendezvous::Store>(std::make_unique<gloo::rendezvous::RedisStore>(host, port));
    } catch (const std::exception& e) {
      return Error{"rendezvous '" + rendezvous + "': cannot reach Redis: " + e.what()};
    }
  }
  if (rendezvous.empty()) return Error{"rendezvous: a shared directory or redis://HOST:PORT is needed"};
  std::error_code ec;
  std::filesystem::create_directories(rendezvous, ec);
  if (ec) return Error{"rendezvous directory '" + rendezvous + "': " + ec.message()};
  return std::unique_ptr<gloo::rendezvous::Store>(std::make_unique<gloo::rendezvous::FileStore>(rendezvous));
}

}  // namespace

std::vector<int64_t> Communicator::all_to_all_counts(const std::vector<int64_t>& counts) {
  std::vector<int64_t> received(counts.size());
  const std::vector<int64_t> one(counts.size(), 1);
  all_to_all_v(counts.data(), one, received.data(), one, sizeof(int64_t));
  return received;
}

Result<std::unique_ptr<Communicator>> connect_group(const GroupOptions& options) {
  if (options.world_size < 1)
    return Error{"data-parallel size must be >= 1, not " + std::to_string(options.world_size)};
  if (options.rank < 0 || options.rank >= options.world_size) {
    return Error{"data-parallel rank " + std::to_string(options.rank) + " is outside 0.." +
                 std::to_string(options.world_size - 1)};
  }
  auto store = open_store(options.rendezvous);
  if (!store.ok()) return store.error();
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.host;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::PrefixStore prefixed(options.group_name, **store);
    auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.world_size);
    context->setTimeout(options.timeout);
    context->connectFullMesh(prefixed, device);
    return std::unique_ptr<Communicator>(std::make_unique<GlooCommunicator>(std::move(context), options.group_name));
  } catch (const std::exception& e) {
    return Error{"data-parallel rank " + std::to_string(options.rank) + " of " + std::to_string(options.world_size) +
                 " could not join group '" + options.group_name + "' at '" + options.rendezvous + "' (host " +
                 options.host + "): " + e.what()};
  }
}

}  // namespace deepinfer
