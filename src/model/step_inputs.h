// A forward step's integer inputs (ForwardBatch's token ids, positions, slots, lengths and tables)
// packed into one host array, uploaded with one copy into one device buffer that persists across
// steps, and the DeviceBatch viewing it. Decode graphs pad a batch to their fixed shape here.
#pragma once

#include <cstdint>
#include <vector>

#include "model/layers/attention.h"

namespace deepinfer {

// The fixed shape a decode graph was captured for: num_seqs sequences of one token each and block
// tables width blocks wide. Rows past the batch's sequences are dummies: token 0 at position 0
// that sees one key (block 0, only read) and writes no cache slot (slot -1).
struct PaddedShape {
  int32_t num_seqs = 0;
  int32_t width = 0;
};

// What a step uploads besides its ForwardBatch.
struct StepExtras {
  const PaddedShape* shape = nullptr;  // pad to this decode graph's shape
  // The backend's memory holding the draws of the step before, for batch.token_from_draw.
  const int32_t* previous_draws = nullptr;
  // The step's draws (CausalLM::launch_sampled), packed into the same copy; their device copy is
  // DeviceBatch::draws.
  const std::vector<kernels::SampleParams>* draws = nullptr;
};

class StepInputs {
 public:
  // Packs batch (padded to *extras.shape when given; the batch must then be a decode batch that
  // fits) and the draws, and enqueues their upload, then the take of its tokens from
  // extras.previous_draws where batch.token_from_draw says so. The returned DeviceBatch views this
  // object's buffer: valid until the next upload. The buffer moves only when a step needs more
  // room than any before (a padded shape keeps room for a draw per row), and then device_data()
  // says where it went. Not thread-safe.
  DeviceBatch upload(Backend& backend, const ForwardBatch& batch, int32_t block_size, const StepExtras& extras = {});
  const void* device_data() const { return device_.data(); }

 private:
  std::vector<int32_t> host_;
  DeviceBuffer device_;
};

}  // namespace deepinfer
