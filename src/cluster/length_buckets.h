// The seeds' first prefill rule: requests are bucketed by input length (< 16K, 16-64K, 64-256K,
// >= 256K tokens) and each bucket gets a share of the prefill instances that follows its demand,
// the compute its requests asked for in the last window.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace deepinfer {

class LengthBuckets {
 public:
  static constexpr int kNumBuckets = 4;
  static constexpr std::array<int64_t, kNumBuckets - 1> kUpperBoundsTokens = {16384, 65536, 262144};

  explicit LengthBuckets(double window_ms) : window_ms_(window_ms) {}

  static int bucket_of(int64_t input_tokens);
  // Moves the clock to now_ms (non-decreasing between calls). Entering a later window adopts the
  // finished one's demand as the split (an idle gap between windows changes nothing).
  void advance_to(double now_ms);
  // Adds a request's estimated compute to its bucket's demand in the current window.
  void add_demand(int bucket, double compute_ms) { window_demand_ms_[static_cast<size_t>(bucket)] += compute_ms; }
  void record(double now_ms, int bucket, double compute_ms) {
    advance_to(now_ms);
    add_demand(bucket, compute_ms);
  }
  // Instances per bucket out of num_instances: the buckets with demand get one each (the largest
  // demands first when there are fewer instances than buckets), the rest go one at a time to the
  // bucket furthest below its share. Before the first window ends there is no split: every bucket
  // gets all instances (see instances_for).
  std::array<size_t, kNumBuckets> split(size_t num_instances) const;
  // The instances [first, last) that serve a bucket: buckets own consecutive ranges in bucket
  // order; a bucket given none borrows its nearest neighbour's (the longer one on a tie).
  std::pair<size_t, size_t> instances_for(int bucket, size_t num_instances) const;
  bool has_split() const { return has_split_; }

 private:
  double window_ms_;
  double window_start_ms_ = 0;
  bool started_ = false;
  bool has_split_ = false;
  std::array<double, kNumBuckets> window_demand_ms_{};
  std::array<double, kNumBuckets> split_demand_ms_{};
};

}  // namespace deepinfer
