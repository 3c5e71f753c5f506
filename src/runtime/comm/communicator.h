// Communicator: the collectives data-parallel ranks run together. The expert-parallel MoE layers
// exchange token rows with all_to_all_v; each forward starts with a vote (all_reduce_max) so that
// ranks without work still join the exchanges; gathers carry small host results (offline outputs,
// load statistics). connect_group() joins a group through Gloo (host memory, TCP between the
// ranks, rendezvous through a shared directory or Redis: existing engines, no protocol of ours).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/result.h"

namespace deepinfer {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int32_t rank() const = 0;
  virtual int32_t world_size() const = 0;
  // How long a collective waits for the other ranks before the group counts as lost.
  virtual std::chrono::milliseconds timeout() const = 0;
  // GroupOptions::group_name, which errors about the group name.
  virtual const std::string& name() const = 0;
  // Rank r sends send_counts[d] elements of elem_bytes to each rank d (send holds them grouped by
  // destination, in rank order) and receives recv_counts[s] elements from each rank s into recv
  // (grouped by source, in rank order). Every rank calls it; counts must agree pairwise (exchange
  // them first with all_to_all_counts). Buffers are host memory.
  virtual void all_to_all_v(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                            const std::vector<int64_t>& recv_counts, size_t elem_bytes) = 0;
  // counts[d] sent to rank d; returns what each rank s sent to this one.
  std::vector<int64_t> all_to_all_counts(const std::vector<int64_t>& counts);
  // values[i] becomes the maximum (sum) over the ranks of values[i].
  virtual void all_reduce_max(std::vector<int64_t>& values) = 0;
  virtual void all_reduce_sum(std::vector<int64_t>& values) = 0;
  // Every rank's bytes, in rank order.
  virtual std::vector<std::string> all_gather(const std::string& bytes) = 0;
};

// How a rank finds the others. A failure of any collective (a rank that died, or silence past
// timeout) throws DeviceError(lost = true) naming the group: the group cannot continue.
struct GroupOptions {
  int32_t rank = 0;
  int32_t world_size = 1;
  // Rendezvous: "redis://HOST:PORT" (a Redis server every rank reaches) or a directory on a
  // filesystem every rank shares (local ranks: a temporary directory).
  std::string rendezvous;
  // Keys of this group in the rendezvous store: groups sharing a store need different ones.
  std::string group_name = "deepinfer";
  // The address the other ranks reach this one at (TCP); 127.0.0.1 for ranks of one machine.
  std::string host = "127.0.0.1";
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
};

// Joins the group (blocks until every rank has joined, or timeout). Errors name the option.
Result<std::unique_ptr<Communicator>> connect_group(const GroupOptions& options);

}  // namespace deepinfer
