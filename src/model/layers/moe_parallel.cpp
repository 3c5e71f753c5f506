// MoeLayer's routed experts under expert parallelism: dispatch, the experts of this rank, combine.
// Every (token, j) slot's row travels to the rank of one replica of its expert (replicas taken in
// turn, so each gets an even share of a hot expert), runs there alone through the expert (top_k 1,
// weight 1), and comes back; moe_combine then sums the slots in j order exactly as moe_experts
// does. In batch-invariant mode the expert rows and the sum are those of a single device, so the
// group gives the single device's bits. The exchanges move host memory (the Gloo group).
#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "model/layers/moe.h"

namespace deepinfer {

void MoeLayer::forward_expert_parallel(Backend& backend, const float* x, int64_t num_tokens, const int32_t* expert_ids,
                                       const float* expert_weights, float* out) const {
  const int32_t world = group_->world_size();
  const int32_t top_k = routing_.top_k;
  const int64_t hidden = hidden_;
  const int64_t num_slots = num_tokens * top_k;
  // A row on the wire: the token's hidden state, then the slot's local expert index as a float's bits.
  const int64_t width = hidden + 1;

  std::vector<int32_t> ids(static_cast<size_t>(num_slots));
  std::vector<float> x_host(static_cast<size_t>(num_tokens * hidden));
  if (num_slots > 0) {
    backend.copy_to_host(ids.data(), expert_ids, ids.size() * sizeof(int32_t));
    backend.copy_to_host(x_host.data(), x, x_host.size() * sizeof(float));
  }

  // Each slot's physical expert: the replicas of a logical expert in turn, starting at this rank's
  // offset so that ranks spread a hot expert's tokens over its copies.
  const std::vector<std::vector<int32_t>> replicas = placement_.replicas();
  std::vector<int32_t> next_replica(replicas.size(), group_->rank());
  std::vector<int32_t> slot_rank(static_cast<size_t>(num_slots)), slot_local(static_cast<size_t>(num_slots));
  std::vector<int64_t> send_counts(static_cast<size_t>(world), 0);
  for (int64_t s = 0; s < num_slots; ++s) {
    const int32_t logical = ids[static_cast<size_t>(s)];
    DI_CHECK(logical >= 0 && logical < routing_.num_experts, "expert id " << logical << " out of range");
    ++routed_tokens_[static_cast<size_t>(logical)];  // this rank's load on the expert, for EPLB
    const std::vector<int32_t>& copies = replicas[static_cast<size_t>(logical)];
    int32_t& turn = next_replica[static_cast<size_t>(logical)];
    const int32_t physical = copies[static_cast<size_t>(turn) % copies.size()];
    ++turn;
    slot_rank[static_cast<size_t>(s)] = placement_.rank_of(physical);
    slot_local[static_cast<size_t>(s)] = physical % placement_.slots_per_rank;
    ++send_counts[static_cast<size_t>(slot_rank[static_cast<size_t>(s)])];
  }
  // Send order: by destination rank, slots in order within one; row_of_slot[s] is slot s's row.
  std::vector<int64_t> send_offset(static_cast<size_t>(world), 0);
  for (int32_t d = 1; d < world; ++d) send_offset[d] = send_offset[d - 1] + send_counts[d - 1];
  std::vector<int32_t> row_of_slot(static_cast<size_t>(num_slots));
  std::vector<float> send(static_cast<size_t>(num_slots * width));
  for (int64_t s = 0; s < num_slots; ++s) {
    const int64_t row = send_offset[static_cast<size_t>(slot_rank[static_cast<size_t>(s)])]++;
    row_of_slot[static_cast<size_t>(s)] = static_cast<int32_t>(row);
    float* dst = send.data() + row * width;
    std::memcpy(dst, x_host.data() + (s / top_k) * hidden, static_cast<size_t>(hidden) * sizeof(float));
    std::memcpy(dst + hidden, &slot_local[static_cast<size_t>(s)], sizeof(int32_t));
  }

  const std::vector<int64_t> recv_counts = group_->all_to_all_counts(send_counts);
  int64_t num_received = 0;
  for (int64_t c : recv_counts) num_received += c;
  std::vector<float> received(static_cast<size_t>(num_received * width));
  group_->all_to_all_v(send.data(), send_counts, received.data(), recv_counts, width * sizeof(float));

  // This rank's experts over the rows it received, each row alone (top_k 1, weight 1).
  std::vector<float> expert_out(static_cast<size_t>(num_received * hidden));
  if (num_received > 0) {
    std::vector<float> rows(static_cast<size_t>(num_received * hidden));
    std::vector<int32_t> local(static_cast<size_t>(num_received));
    for (int64_t r = 0; r < num_received; ++r) {
      std::memcpy(rows.data() + r * hidden, received.data() + r * width, static_cast<size_t>(hidden) * sizeof(float));
      std::memcpy(&local[static_cast<size_t>(r)], received.data() + r * width + hidden, sizeof(int32_t));
    }
    kernels::MoeExperts one = experts_view();
    one.top_k = 1;
    const std::vector<float> ones(static_cast<size_t>(num_received), 1.0f);
    const size_t row_bytes = static_cast<size_t>(num_received * hidden) * sizeof(float);
    DeviceBuffer device_rows = backend.allocate(row_bytes);
    DeviceBuffer device_out = backend.allocate(row_bytes);
    DeviceBuffer device_ids = backend.allocate(local.size() * sizeof(int32_t));
    DeviceBuffer device_ones = backend.allocate(ones.size() * sizeof(float));
    DeviceBuffer workspace =
        backend.allocate(static_cast<size_t>(kernels::moe_workspace_floats(num_received, one)) * sizeof(float));
    backend.copy_to_device(device_rows.data(), rows.data(), row_bytes);
    backend.copy_to_device(device_ids.data(), local.data(), local.size() * sizeof(int32_t));
    backend.copy_to_device(device_ones.data(), ones.data(), ones.size() * sizeof(float));
    backend.moe_experts(device_rows.as<float>(), num_received, device_ids.as<int32_t>(), device_ones.as<float>(), one,
                        workspace.as<float>(), token_counts_.as<int64_t>(), device_out.as<float>());
    backend.copy_to_host(expert_out.data(), device_out.data(), row_bytes);
  }

  // The outputs go back the way the rows came.
  std::vector<float> returned(static_cast<size_t>(num_slots * hidden));
  group_->all_to_all_v(expert_out.data(), recv_counts, returned.data(), send_counts, hidden * sizeof(float));
  if (num_tokens == 0) return;
  DeviceBuffer device_returned = backend.allocate(returned.size() * sizeof(float));
  DeviceBuffer device_row_of_slot = backend.allocate(row_of_slot.size() * sizeof(int32_t));
  backend.copy_to_device(device_returned.data(), returned.data(), returned.size() * sizeof(float));
  backend.copy_to_device(device_row_of_slot.data(), row_of_slot.data(), row_of_slot.size() * sizeof(int32_t));
  backend.moe_combine(device_returned.as<float>(), device_row_of_slot.as<int32_t>(), expert_weights, num_tokens, top_k,
                      hidden, out);
}

}  // namespace deepinfer
