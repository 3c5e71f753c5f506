// OpProfile: a map from op name to calls, time and bytes; the table it prints; the fork/join probe.
#include "runtime/cpu/op_profile.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace deepinfer {

OpProfile::OpProfile() {
  const char* env = std::getenv("DEEPINFER_PROFILE");
  report_at_exit_ = env != nullptr && env[0] != '\0' && std::strcmp(env, "0") != 0;
  enabled_ = report_at_exit_;
}

OpProfile::~OpProfile() {
  if (report_at_exit_ && !entries_.empty()) std::fputs(report(1, 0.0).c_str(), stderr);
}

OpProfile& OpProfile::global() {
  static OpProfile profile;
  return profile;
}

void OpProfile::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.clear();
}

void OpProfile::add(const std::string& op, double seconds, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  Entry& entry = entries_[op];
  entry.op = op;
  ++entry.num_calls;
  entry.seconds += seconds;
  entry.bytes += bytes;
}

std::vector<OpProfile::Entry> OpProfile::entries() const {
  std::vector<Entry> sorted;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [op, entry] : entries_) sorted.push_back(entry);
  }
  std::sort(sorted.begin(), sorted.end(), [](const Entry& a, const Entry& b) { return a.seconds > b.seconds; });
  return sorted;
}

std::string OpProfile::report(int64_t num_steps, double wall_seconds) const {
  const std::vector<Entry> sorted = entries();
  double total_s = 0.0;
  int64_t total_calls = 0;
  for (const Entry& e : sorted) {
    total_s += e.seconds;
    total_calls += e.num_calls;
  }
  const auto steps = static_cast<double>(std::max<int64_t>(num_steps, 1));
  std::string out;
  char line[256];
  std::snprintf(line, sizeof(line), "%-52s %10s %10s %7s %8s %8s\n", "op", "calls/step", "ms/step", "share",
                "us/call", "GB/s");
  out += line;
  for (const Entry& e : sorted) {
    const double gb_s = e.bytes > 0 && e.seconds > 0 ? static_cast<double>(e.bytes) / e.seconds / 1e9 : 0.0;
    std::snprintf(line, sizeof(line), "%-52s %10.1f %10.3f %6.1f%% %8.1f %8.1f\n", e.op.c_str(),
                  static_cast<double>(e.num_calls) / steps, 1e3 * e.seconds / steps,
                  total_s > 0 ? 100.0 * e.seconds / total_s : 0.0,
                  1e6 * e.seconds / static_cast<double>(std::max<int64_t>(e.num_calls, 1)), gb_s);
    out += line;
  }
  std::snprintf(line, sizeof(line), "%-52s %10.1f %10.3f\n", "all ops", static_cast<double>(total_calls) / steps,
                1e3 * total_s / steps);
  out += line;
  if (wall_seconds > 0) {
    std::snprintf(line, sizeof(line), "%-52s %10s %10.3f\n", "outside the ops (sampling, batch set-up)", "",
                  1e3 * (wall_seconds - total_s) / steps);
    out += line;
  }
  return out;
}

OpTimer::OpTimer(const char* op, int64_t bytes) : active_(OpProfile::global().enabled()), bytes_(bytes) {
  if (active_) {
    name_ = op;
    start_ = std::chrono::steady_clock::now();
  }
}

OpTimer::~OpTimer() {
  if (!active_) return;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  OpProfile::global().add(name_, seconds, bytes_);
}

double measure_parallel_region_us(int repeats) {
  constexpr int kRegionsPerBatch = 200;
  std::vector<double> batches;
  volatile int sink = 0;
  for (int r = 0; r < std::max(repeats, 1); ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kRegionsPerBatch; ++i) {
#pragma omp parallel
      {
        if (omp_get_thread_num() == 0) sink = sink + 1;
      }
    }
    batches.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() * 1e6 /
                      kRegionsPerBatch);
  }
  std::sort(batches.begin(), batches.end());
  return batches[batches.size() / 2];
}

}  // namespace deepinfer
