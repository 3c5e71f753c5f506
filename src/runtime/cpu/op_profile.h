// Per-op wall time of the host backends' ops: where a decode step's time goes, op by op
// (`deepinfer bench --profile`, or DEEPINFER_PROFILE=1 for any command, reported at exit).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace deepinfer {

// Thread-safe. Off unless the environment sets DEEPINFER_PROFILE to a value other than "" or "0"
// (then the report goes to stderr when the process exits) or set_enabled(true) is called.
class OpProfile {
 public:
  struct Entry {
    std::string op;  // e.g. "rms_norm", "matmul m=1 n=2048 k=1024 bf16"
    int64_t num_calls = 0;
    double seconds = 0.0;
    int64_t bytes = 0;  // weight bytes read (matmuls), else 0
  };

  static OpProfile& global();
  ~OpProfile();

  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  void set_enabled(bool on) { enabled_.store(on, std::memory_order_relaxed); }
  void reset();
  void add(const std::string& op, double seconds, int64_t bytes);
  // Sorted by time, longest first.
  std::vector<Entry> entries() const;
  // A table: per op calls per step, ms per step, share of the profiled time and GB/s; with
  // wall_seconds > 0 also the time outside the ops (sampling, batch set-up) per step.
  std::string report(int64_t num_steps, double wall_seconds) const;

 private:
  OpProfile();

  std::atomic<bool> enabled_{false};
  bool report_at_exit_ = false;
  mutable std::mutex mutex_;
  std::map<std::string, Entry> entries_;
};

// Times one op call into OpProfile::global() when profiling is on; costs one relaxed load when off.
class OpTimer {
 public:
  explicit OpTimer(const char* op, int64_t bytes = 0);
  // For ops whose name is only built when profiling (matmul shapes).
  template <typename NameFn>
  OpTimer(NameFn&& name_fn, int64_t bytes) : active_(OpProfile::global().enabled()), bytes_(bytes) {
    if (active_) {
      name_ = name_fn();
      start_ = std::chrono::steady_clock::now();
    }
  }
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  bool active_;
  int64_t bytes_;
  std::string name_;
  std::chrono::steady_clock::time_point start_;
};

// Microseconds one empty OpenMP parallel region (fork + join of the current thread team) takes,
// median of `repeats` timed batches of 200: the fixed cost every parallel op pays.
double measure_parallel_region_us(int repeats);

}  // namespace deepinfer
