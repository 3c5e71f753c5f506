// Joining a data-parallel group (DataParallelConfig, include/deepinfer/llm.h): the communicator the
// ranks share and, with expert parallelism, what the model's MoE layers need to spread their
// experts over the ranks.
#pragma once

#include <memory>
#include <string>

#include "deepinfer/llm.h"
#include "model/expert_parallel.h"
#include "runtime/comm/communicator.h"

namespace deepinfer {

struct DataParallelGroup {
  std::shared_ptr<Communicator> group;                       // null without a group (size 1)
  std::shared_ptr<const ExpertParallelism> expert_parallel;  // null unless expert_parallel and size > 1
};

// Validates the config (errors name the field) and, with expert parallelism, that the model in
// model_dir has MoE layers; then joins the group and reads the placement file. batch_invariant (the
// engine's) settles the "auto" payload.
Result<DataParallelGroup> join_data_parallel_group(const DataParallelConfig& config, const std::string& model_dir,
                                                   bool batch_invariant);

}  // namespace deepinfer
