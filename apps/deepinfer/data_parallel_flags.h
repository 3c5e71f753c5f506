// The data-parallel flags of generate, score and serve, and the local ranks a command starts.
//   --data-parallel-size N        ranks in the group (default 1)
//   --data-parallel-size-local L  ranks this machine runs (default N: every rank here)
//   --data-parallel-start-rank S  the first of this machine's ranks (default 0)
//   --data-parallel-rank R        this process is rank R and starts no other (how multi-machine
//                                 groups start, and what a started rank is given)
//   --data-parallel-address A     the rendezvous: a directory every rank shares or redis://HOST:PORT
//                                 (default for one machine: a fresh temporary directory)
//   --data-parallel-host H        the address other ranks reach this one at (default 127.0.0.1)
//   --expert-parallel             spread the MoE layers' experts over the ranks
//   --num-redundant-experts R     extra expert slots per MoE layer (copies of hot experts)
//   --expert-placement FILE       the placement of every MoE layer (docs/parallel.md)
//   --expert-parallel-transport T how MoE rows travel: auto (default), nccl or host
//   --eplb-window N               EPLB: forward rounds of expert load a re-placement is fitted to (1000)
//   --eplb-interval N             EPLB: forward rounds between re-placements (10000; 0: never)
//   --eplb-policy P               EPLB: peak-aware (ours, default) or deepseek (DeepSeek's eplb.py)
//   --expert-placement-out FILE   rank 0 writes the placement there at load and after each re-placement
// With --device cuda, each started rank gets its own GPU through CUDA_VISIBLE_DEVICES: the L-th
// local rank the L-th GPU this process sees (in turn when ranks outnumber GPUs).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "args.h"
#include "deepinfer/llm.h"

namespace deepinfer::cli {

std::set<std::string> data_parallel_value_flags(std::set<std::string> extra);
std::set<std::string> data_parallel_bool_flags(std::set<std::string> extra);

// The ranks this process started; the destructor stops any still running (this process failed),
// after a moment in which they may end by themselves and print their own errors.
class LocalRanks {
 public:
  LocalRanks() = default;
  LocalRanks(const LocalRanks&) = delete;
  LocalRanks& operator=(const LocalRanks&) = delete;
  ~LocalRanks();
  // Waits for every started rank; an error names the ones that failed.
  Result<void> wait();
  // Stops the ranks still running after `grace` (SIGTERM: a serving rank shuts down cleanly).
  void stop(std::chrono::milliseconds grace);

 private:
  friend Result<DataParallelConfig> data_parallel_from_args(const Args&, int, char**, LocalRanks&);
  std::vector<pid_t> pids_;
  std::vector<int32_t> ranks_;
  std::string rendezvous_dir_;  // removed at the end when this process made it
};

// The config the flags ask for. When this process starts its machine's ranks (size > 1 and no
// --data-parallel-rank), the other local ranks are started as copies of this command (argv: the
// command's own arguments, argv[0] the subcommand) with --data-parallel-rank and the address
// added, their standard output discarded (rank 0 writes the results); started records them.
Result<DataParallelConfig> data_parallel_from_args(const Args& args, int argc, char** argv, LocalRanks& started);

}  // namespace deepinfer::cli
