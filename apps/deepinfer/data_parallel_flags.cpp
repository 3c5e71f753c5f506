// Reading the data-parallel flags and starting this machine's other ranks.
#include "data_parallel_flags.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <sstream>
#include <string_view>
#include <thread>

#include "runtime/backend.h"
#include "runtime/comm/device_exchange.h"

namespace deepinfer::cli {
namespace {

constexpr const char* kRankFlag = "--data-parallel-rank";
constexpr const char* kAddressFlag = "--data-parallel-address";

Result<int32_t> positive_flag(const Args& args, const char* flag, int64_t fallback, int64_t lowest) {
  auto value = args.get_int(flag, fallback);
  if (!value.ok()) return value.error();
  if (*value < lowest || *value > 4096) {
    return Error{std::string(flag) + " must be in [" + std::to_string(lowest) + ", 4096], got " +
                 std::to_string(*value)};
  }
  return static_cast<int32_t>(*value);
}

std::string fresh_rendezvous_dir() {
  std::random_device random;
  const auto dir = std::filesystem::temp_directory_path() /
                   ("deepinfer-dp-" + std::to_string(::getpid()) + "-" + std::to_string(random()));
  return dir.string();
}

// The GPUs local ranks take in turn: this process's CUDA_VISIBLE_DEVICES list, else every GPU it
// sees; empty without --device cuda (a CPU group touches no GPU).
std::vector<std::string> gpus_for_ranks(const Args& args) {
  std::vector<std::string> gpus;
  if (args.find("--device").value_or("cpu") != "cuda") return gpus;
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible != nullptr) {
    std::stringstream list(visible);
    for (std::string gpu; std::getline(list, gpu, ',');) {
      if (!gpu.empty()) gpus.push_back(gpu);
    }
    return gpus;
  }
  for (int32_t gpu = 0; gpu < visible_cuda_devices(); ++gpu) gpus.push_back(std::to_string(gpu));
  return gpus;
}

// This process's environment, with CUDA_VISIBLE_DEVICES=gpu when gpu is not empty.
std::vector<std::string> environment_with_gpu(const std::string& gpu) {
  constexpr std::string_view kVisible = "CUDA_VISIBLE_DEVICES=";
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    if (gpu.empty() || std::string_view(*entry).rfind(kVisible, 0) != 0) env.emplace_back(*entry);
  }
  if (!gpu.empty()) env.push_back(std::string(kVisible) + gpu);
  return env;
}

// Starts this program as rank `rank` on `gpu` (empty: the environment as it is): the same
// arguments plus the rank and the rendezvous.
Result<pid_t> start_rank(int argc, char** argv, int32_t rank, const std::string& address, const std::string& gpu) {
  std::vector<std::string> words = {"deepinfer"};
  for (int i = 0; i < argc; ++i) words.emplace_back(argv[i]);
  words.insert(words.end(), {kRankFlag, std::to_string(rank), kAddressFlag, address});
  // Built before fork: the child of a threaded process may only exec.
  std::vector<std::string> env = environment_with_gpu(gpu);
  std::vector<char*> exec_argv, exec_env;
  for (std::string& word : words) exec_argv.push_back(word.data());
  exec_argv.push_back(nullptr);
  for (std::string& entry : env) exec_env.push_back(entry.data());
  exec_env.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return Error{"cannot start data-parallel rank " + std::to_string(rank) + ": fork failed"};
  if (pid == 0) {
    // A started rank ends with the process that started it, and leaves the output to rank 0.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
    const int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) ::dup2(null, STDOUT_FILENO);
    ::execve("/proc/self/exe", exec_argv.data(), exec_env.data());
    ::_exit(127);
  }
  return pid;
}

// --eplb-window, --eplb-interval, --eplb-policy and --expert-placement-out into config.
Result<void> eplb_from_args(const Args& args, DataParallelConfig& config) {
  for (const char* flag : {"--eplb-window", "--eplb-interval", "--eplb-policy", "--expert-placement-out"}) {
    if (args.has(flag) && !config.expert_parallel) return Error{std::string(flag) + " needs --expert-parallel"};
  }
  auto window = args.get_int("--eplb-window", config.eplb_window_steps);
  if (!window.ok()) return window.error();
  if (*window < 1 || *window > 1'000'000) {
    return Error{"--eplb-window must be in [1, 1000000] forward rounds, got " + std::to_string(*window)};
  }
  config.eplb_window_steps = static_cast<int32_t>(*window);
  auto interval = args.get_int("--eplb-interval", config.eplb_interval_steps);
  if (!interval.ok()) return interval.error();
  if (*interval < 0) {
    return Error{"--eplb-interval must be >= 0 forward rounds (0: never re-place), got " + std::to_string(*interval)};
  }
  config.eplb_interval_steps = *interval;
  config.eplb_policy = args.find("--eplb-policy").value_or(config.eplb_policy);
  if (config.eplb_policy != "peak-aware" && config.eplb_policy != "deepseek") {
    return Error{"--eplb-policy must be peak-aware or deepseek, got '" + config.eplb_policy + "'"};
  }
  config.expert_placement_out_file = args.find("--expert-placement-out").value_or("");
  return {};
}

}  // namespace

std::set<std::string> data_parallel_value_flags(std::set<std::string> extra) {
  extra.insert({"--data-parallel-size", "--data-parallel-size-local", "--data-parallel-start-rank", kRankFlag,
                kAddressFlag, "--data-parallel-host", "--num-redundant-experts", "--expert-placement", "--eplb-window",
                "--eplb-interval", "--eplb-policy", "--expert-placement-out", "--expert-parallel-transport",
                "--expert-parallel-payload", "--expert-parallel-fixed-tokens"});
  return extra;
}

std::set<std::string> data_parallel_bool_flags(std::set<std::string> extra) {
  extra.insert("--expert-parallel");
  return extra;
}

LocalRanks::~LocalRanks() {
  // This process failed. A started rank that failed too is often the cause (rank 0 then only sees
  // its peer leave), so each gets a moment to end and print its own error before it is stopped.
  stop(std::chrono::seconds(2));
  if (!rendezvous_dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(rendezvous_dir_, ignored);
  }
}

void LocalRanks::stop(std::chrono::milliseconds grace) {
  const auto deadline = std::chrono::steady_clock::now() + grace;
  std::vector<pid_t> running;
  for (pid_t pid : pids_) {
    while (::waitpid(pid, nullptr, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() >= deadline) {
        running.push_back(pid);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  for (pid_t pid : running) ::kill(pid, SIGTERM);
  for (pid_t pid : running) ::waitpid(pid, nullptr, 0);
  pids_.clear();
  ranks_.clear();
}

Result<void> LocalRanks::wait() {
  std::string failed;
  for (size_t i = 0; i < pids_.size(); ++i) {
    int status = 0;
    ::waitpid(pids_[i], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      failed += (failed.empty() ? "" : ", ") + std::to_string(ranks_[i]);
    }
  }
  pids_.clear();
  if (!failed.empty()) return Error{"data-parallel rank(s) " + failed + " failed (their errors are above)"};
  return {};
}

Result<DataParallelConfig> data_parallel_from_args(const Args& args, int argc, char** argv, LocalRanks& started) {
  DataParallelConfig config;
  auto size = positive_flag(args, "--data-parallel-size", 1, 1);
  if (!size.ok()) return size.error();
  config.size = *size;
  auto local = positive_flag(args, "--data-parallel-size-local", config.size, 1);
  if (!local.ok()) return local.error();
  auto start = positive_flag(args, "--data-parallel-start-rank", 0, 0);
  if (!start.ok()) return start.error();
  if (*start + *local > config.size) {
    return Error{"--data-parallel-start-rank + --data-parallel-size-local (" + std::to_string(*start + *local) +
                 ") exceeds --data-parallel-size " + std::to_string(config.size)};
  }
  auto redundant = positive_flag(args, "--num-redundant-experts", 0, 0);
  if (!redundant.ok()) return redundant.error();
  config.num_redundant_experts = *redundant;
  config.expert_parallel = args.has("--expert-parallel");
  config.expert_placement_file = args.find("--expert-placement").value_or("");
  config.expert_parallel_transport = args.find("--expert-parallel-transport").value_or("auto");
  if (auto transport = parse_exchange_transport(config.expert_parallel_transport); !transport.ok()) {
    return Error{"--expert-parallel-transport: " + transport.error().message};
  }
  config.expert_parallel_payload = args.find("--expert-parallel-payload").value_or("auto");
  if (auto payload = parse_exchange_payload(config.expert_parallel_payload, false); !payload.ok()) {
    return Error{"--expert-parallel-payload: " + payload.error().message};
  }
  auto fixed_tokens = args.get_int("--expert-parallel-fixed-tokens", config.expert_parallel_fixed_tokens);
  if (!fixed_tokens.ok()) return fixed_tokens.error();
  if (*fixed_tokens < 0 || *fixed_tokens > 65536) {
    return Error{"--expert-parallel-fixed-tokens must be in [0, 65536] tokens (0: never fixed-size blocks), got " +
                 std::to_string(*fixed_tokens)};
  }
  config.expert_parallel_fixed_tokens = *fixed_tokens;
  config.host = args.find("--data-parallel-host").value_or(config.host);
  config.address = args.find(kAddressFlag).value_or("");
  if (!config.expert_parallel && (args.has("--num-redundant-experts") || args.has("--expert-placement") ||
                                  args.has("--expert-parallel-transport") || args.has("--expert-parallel-payload") ||
                                  args.has("--expert-parallel-fixed-tokens"))) {
    return Error{
        "--num-redundant-experts, --expert-placement, --expert-parallel-transport, --expert-parallel-payload and "
        "--expert-parallel-fixed-tokens need --expert-parallel"};
  }
  if (auto eplb = eplb_from_args(args, config); !eplb.ok()) return eplb.error();
  if (args.has(kRankFlag)) {
    auto rank = positive_flag(args, kRankFlag, 0, 0);
    if (!rank.ok()) return rank.error();
    config.rank = *rank;
    if (config.rank >= config.size) {
      return Error{std::string(kRankFlag) + " " + std::to_string(config.rank) + " is outside 0.." +
                   std::to_string(config.size - 1)};
    }
    if (config.size > 1 && config.address.empty()) return Error{std::string(kRankFlag) + " needs " + kAddressFlag};
    return config;
  }
  config.rank = *start;
  if (config.size == 1) return config;
  if (config.address.empty()) {
    if (*local != config.size) return Error{"ranks on several machines need --data-parallel-address"};
    config.address = fresh_rendezvous_dir();
    started.rendezvous_dir_ = config.address;
  }
  // This process, local rank 0, keeps the first GPU it sees; local rank L takes the L-th.
  const std::vector<std::string> gpus = gpus_for_ranks(args);
  for (int32_t rank = *start + 1; rank < *start + *local; ++rank) {
    const size_t local_rank = static_cast<size_t>(rank - *start);
    auto pid = start_rank(argc, argv, rank, config.address, gpus.empty() ? "" : gpus[local_rank % gpus.size()]);
    if (!pid.ok()) return pid.error();
    started.pids_.push_back(*pid);
    started.ranks_.push_back(rank);
  }
  return config;
}

}  // namespace deepinfer::cli
