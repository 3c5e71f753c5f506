// MoeLayer's routed experts under expert parallelism: dispatch, the experts of this rank, combine.
// Every (token, j) slot's row travels to the rank of one replica of its expert (replicas taken in
// turn, so each gets an even share of a hot expert), runs there alone through the expert (top_k 1,
// weight 1), and comes back; moe_combine then sums the slots in j order exactly as moe_experts
// does. In batch-invariant mode the expert rows and the sum are those of a single device, so the
// group gives the single device's bits (float32 payloads; bf16 and FP8 ones round the rows). The rows
// stay in the backend's memory and travel through the model's DeviceExchange (NCCL between GPUs) in
// the payload's element type. Rounds of many tokens plan on the host: the routing is read back,
// and the counts and each row's expert index go through the group before the rows. Rounds of few
// tokens (decode; ExpertParallelism::fixed_dispatch_tokens) plan on the device instead
// (Backend::moe_dispatch): each rank sends every other a block of room rows, empty ones included,
// with the rows' expert slots (-1: empty) through the same exchange, and nothing waits on the host:
// the exchanges stay on the backend's stream until the model waits for them at the forward's end.
// Both send the same rows in the same order, so they give the same bits.
#include <algorithm>
#include <vector>

#include "core/check.h"
#include "model/layers/moe.h"
#include "runtime/device_upload.h"

namespace deepinfer {
namespace {

// How a round's exchanges meet the host: each waited for before the call returns, or left on the
// backend's stream for the forward's end (DeviceExchange::enqueue_all_to_all_v).
enum class ExchangeWait : uint8_t { kEach, kAtForwardEnd };

void run_exchange(DeviceExchange& exchange, ExchangeWait wait, const void* send,
                  const std::vector<int64_t>& send_counts, void* recv, const std::vector<int64_t>& recv_counts,
                  size_t elem_bytes) {
  if (wait == ExchangeWait::kEach) {
    exchange.all_to_all_v(send, send_counts, recv, recv_counts, elem_bytes);
  } else {
    exchange.enqueue_all_to_all_v(send, send_counts, recv, recv_counts, elem_bytes);
  }
}

// Sends rows ([num_sent, width] floats, in send order) to the ranks as send_counts says and receives
// theirs into out ([num_received, width]), in the payload's element type on the way: float32 rows
// travel as they are, others are packed before and unpacked after.
void exchange_rows(Backend& backend, DeviceExchange& exchange, ExchangeWait wait, const float* rows, int64_t num_sent,
                   const std::vector<int64_t>& send_counts, float* out, int64_t num_received,
                   const std::vector<int64_t>& recv_counts, int64_t width, DType dtype) {
  const auto row_bytes = static_cast<size_t>(kernels::payload_row_bytes(dtype, width));
  if (dtype == DType::kF32) {
    run_exchange(exchange, wait, rows, send_counts, out, recv_counts, row_bytes);
    return;
  }
  DeviceBuffer packed_send = allocate_elements<char>(backend, num_sent * static_cast<int64_t>(row_bytes));
  DeviceBuffer packed_recv = allocate_elements<char>(backend, num_received * static_cast<int64_t>(row_bytes));
  backend.pack_rows(rows, num_sent, width, dtype, packed_send.data());
  run_exchange(exchange, wait, packed_send.data(), send_counts, packed_recv.data(), recv_counts, row_bytes);
  backend.unpack_rows(packed_recv.data(), num_received, width, dtype, out);
}

}  // namespace

void MoeLayer::forward_expert_parallel(Backend& backend, const float* x, int64_t num_tokens, const int32_t* expert_ids,
                                       const float* expert_weights, float* out) const {
  if (parallel_->fixed_round()) {
    forward_fixed_dispatch(backend, x, num_tokens, expert_ids, expert_weights, parallel_->current_round->max_tokens,
                           out);
    return;
  }
  const int32_t world = parallel_->group->world_size();
  const int32_t top_k = routing_.top_k;
  const int64_t hidden = hidden_;
  const int64_t num_slots = num_tokens * top_k;

  std::vector<int32_t> ids(static_cast<size_t>(num_slots));
  if (num_slots > 0) backend.copy_to_host(ids.data(), expert_ids, ids.size() * sizeof(int32_t));

  // Each slot's physical expert: the replicas of a logical expert in turn, starting at this rank's
  // offset so that ranks spread a hot expert's tokens over its copies.
  const std::vector<std::vector<int32_t>> replicas = placement_.replicas();
  std::vector<int32_t> next_replica(replicas.size(), parallel_->group->rank());
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
  // Send order: by destination rank, slots in order within one. Row r of the send buffer is token
  // token_of_row[r]'s row for the expert slot_of_row[r] of its rank; slot s went out as row_of_slot[s].
  std::vector<int64_t> send_offset(static_cast<size_t>(world), 0);
  for (int32_t d = 1; d < world; ++d) send_offset[d] = send_offset[d - 1] + send_counts[d - 1];
  std::vector<int32_t> row_of_slot(static_cast<size_t>(num_slots));
  std::vector<int32_t> token_of_row(static_cast<size_t>(num_slots)), slot_of_row(static_cast<size_t>(num_slots));
  for (int64_t s = 0; s < num_slots; ++s) {
    const int64_t row = send_offset[static_cast<size_t>(slot_rank[static_cast<size_t>(s)])]++;
    row_of_slot[static_cast<size_t>(s)] = static_cast<int32_t>(row);
    token_of_row[static_cast<size_t>(row)] = static_cast<int32_t>(s / top_k);
    slot_of_row[static_cast<size_t>(row)] = slot_local[static_cast<size_t>(s)];
  }

  const std::vector<int64_t> recv_counts = parallel_->group->all_to_all_counts(send_counts);
  int64_t num_received = 0;
  for (int64_t c : recv_counts) num_received += c;
  std::vector<int32_t> received_slots(static_cast<size_t>(num_received));
  parallel_->group->all_to_all_v(slot_of_row.data(), send_counts, received_slots.data(), recv_counts, sizeof(int32_t));

  // The send rows are copies of x's token rows (embedding over x as a float32 table is that gather).
  DeviceBuffer send_rows = allocate_elements<float>(backend, num_slots * hidden);
  if (num_slots > 0) {
    const DeviceBuffer device_token_of_row = upload_vector(backend, token_of_row);
    const kernels::WeightView x_table{x, DType::kF32, num_tokens, hidden};
    backend.embedding(x_table, device_token_of_row.as<int32_t>(), num_slots, send_rows.as<float>());
  }
  DeviceBuffer received = allocate_elements<float>(backend, num_received * hidden);
  exchange_rows(backend, *exchange_, ExchangeWait::kEach, send_rows.as<float>(), num_slots, send_counts,
                received.as<float>(), num_received, recv_counts, hidden, parallel_->payload.dispatch);

  // This rank's experts over the rows it received, each row alone (top_k 1, weight 1).
  DeviceBuffer expert_out = allocate_elements<float>(backend, num_received * hidden);
  if (num_received > 0) {
    kernels::MoeExperts one = experts_view();
    one.top_k = 1;
    const DeviceBuffer device_slots = upload_vector(backend, received_slots);
    const DeviceBuffer device_ones =
        upload_vector(backend, std::vector<float>(static_cast<size_t>(num_received), 1.0f));
    DeviceBuffer workspace = allocate_elements<float>(backend, kernels::moe_workspace_floats(num_received, one));
    backend.moe_experts(received.as<float>(), num_received, device_slots.as<int32_t>(), device_ones.as<float>(), one,
                        workspace.as<float>(), token_counts_.as<int64_t>(), expert_out.as<float>());
  }

  // The outputs go back the way the rows came.
  DeviceBuffer returned = allocate_elements<float>(backend, num_slots * hidden);
  exchange_rows(backend, *exchange_, ExchangeWait::kEach, expert_out.as<float>(), num_received, recv_counts,
                returned.as<float>(), num_slots, send_counts, hidden, parallel_->payload.combine);
  if (num_tokens == 0) return;
  const DeviceBuffer device_row_of_slot = upload_vector(backend, row_of_slot);
  backend.moe_combine(returned.as<float>(), device_row_of_slot.as<int32_t>(), expert_weights, num_tokens, top_k, hidden,
                      out);
}

void MoeLayer::forward_fixed_dispatch(Backend& backend, const float* x, int64_t num_tokens, const int32_t* expert_ids,
                                      const float* expert_weights, int64_t round_tokens, float* out) const {
  DI_CHECK(num_tokens <= round_tokens,
           "a fixed-size expert exchange for " << round_tokens << " tokens got " << num_tokens << " on this rank");
  const int32_t world = parallel_->group->world_size();
  const int32_t top_k = routing_.top_k;
  const int64_t hidden = hidden_;
  const int64_t num_slots = num_tokens * top_k;
  // A token's choices are distinct experts, so a rank gets at most slots_per_rank of them.
  const int64_t room = round_tokens * std::min(top_k, placement_.slots_per_rank);
  const int64_t num_rows = world * room;

  DeviceBuffer send_slots = allocate_elements<int32_t>(backend, num_rows);
  DeviceBuffer row_of_slot = allocate_elements<int32_t>(backend, num_slots);
  DeviceBuffer scratch =
      allocate_elements<int32_t>(backend, kernels::moe_dispatch_scratch_ints(num_slots, world, room));
  DeviceBuffer send_rows = allocate_elements<float>(backend, num_rows * hidden);
  kernels::ExpertDispatch dispatch;
  dispatch.replica_offsets = replica_offsets_.as<int32_t>();
  dispatch.replica_slots = replica_slots_.as<int32_t>();
  dispatch.num_logical = routing_.num_experts;
  dispatch.slots_per_rank = placement_.slots_per_rank;
  dispatch.world = world;
  dispatch.rank = parallel_->group->rank();
  dispatch.room = room;
  dispatch.send_slot = send_slots.as<int32_t>();
  dispatch.row_of_slot = row_of_slot.as<int32_t>();
  dispatch.routed_tokens = routed_counter_;  // this rank's load on each expert, for EPLB
  dispatch.scratch = scratch.as<int32_t>();
  backend.moe_dispatch(x, num_tokens, hidden, expert_ids, top_k, dispatch, send_rows.as<float>());

  // Every rank sends every other room rows and the slots they are for (-1: an empty row). Nothing
  // here waits on the host: the model waits once, at the forward's end (DeviceExchange::wait_enqueued).
  const std::vector<int64_t> counts(static_cast<size_t>(world), room);
  constexpr ExchangeWait kLater = ExchangeWait::kAtForwardEnd;
  DeviceBuffer received_slots = allocate_elements<int32_t>(backend, num_rows);
  run_exchange(*exchange_, kLater, send_slots.data(), counts, received_slots.data(), counts, sizeof(int32_t));
  DeviceBuffer received = allocate_elements<float>(backend, num_rows * hidden);
  exchange_rows(backend, *exchange_, kLater, send_rows.as<float>(), num_rows, counts, received.as<float>(), num_rows,
                counts, hidden, parallel_->payload.dispatch);

  // This rank's experts over the rows it received, each row alone; empty rows come back as zeros.
  kernels::MoeExperts one = experts_view();
  one.top_k = 1;
  // The rows' weights are all 1: uploaded once for the most rows yet, not at every forward (an
  // upload may wait on the stream, so the exchanges are waited for first).
  if (ones_.size_bytes() < static_cast<size_t>(num_rows) * sizeof(float)) {
    exchange_->wait_enqueued();
    ones_ = upload_vector(backend, std::vector<float>(static_cast<size_t>(num_rows), 1.0f));
  }
  DeviceBuffer workspace = allocate_elements<float>(backend, kernels::moe_workspace_floats(num_rows, one));
  DeviceBuffer expert_out = allocate_elements<float>(backend, num_rows * hidden);
  // Experts that read their grouping back make the host wait on the stream: the exchanges first.
  if (backend.moe_step_reads_back(num_rows, one)) exchange_->wait_enqueued();
  backend.moe_experts(received.as<float>(), num_rows, received_slots.as<int32_t>(), ones_.as<float>(), one,
                      workspace.as<float>(), token_counts_.as<int64_t>(), expert_out.as<float>());

  DeviceBuffer returned = allocate_elements<float>(backend, num_rows * hidden);
  exchange_rows(backend, *exchange_, kLater, expert_out.as<float>(), num_rows, counts, returned.as<float>(), num_rows,
                counts, hidden, parallel_->payload.combine);
  if (num_tokens == 0) return;
  backend.moe_combine(returned.as<float>(), row_of_slot.as<int32_t>(), expert_weights, num_tokens, top_k, hidden, out);
}

}  // namespace deepinfer
