// LengthBuckets: the demand window and the split of instances among the buckets.
#include "cluster/length_buckets.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace deepinfer {

int LengthBuckets::bucket_of(int64_t input_tokens) {
  int bucket = 0;
  while (bucket < kNumBuckets - 1 && input_tokens >= kUpperBoundsTokens[static_cast<size_t>(bucket)]) ++bucket;
  return bucket;
}

void LengthBuckets::advance_to(double now_ms) {
  if (!started_) {
    started_ = true;
    window_start_ms_ = now_ms;
  }
  if (now_ms >= window_start_ms_ + window_ms_) {
    const double total = std::accumulate(window_demand_ms_.begin(), window_demand_ms_.end(), 0.0);
    if (total > 0) {
      split_demand_ms_ = window_demand_ms_;
      has_split_ = true;
    }
    window_demand_ms_.fill(0);
    window_start_ms_ += window_ms_ * std::floor((now_ms - window_start_ms_) / window_ms_);
  }
}

std::array<size_t, LengthBuckets::kNumBuckets> LengthBuckets::split(size_t num_instances) const {
  std::array<size_t, kNumBuckets> counts{};
  std::array<size_t, kNumBuckets> by_demand{};
  std::iota(by_demand.begin(), by_demand.end(), size_t{0});
  std::stable_sort(by_demand.begin(), by_demand.end(),
                   [&](size_t a, size_t b) { return split_demand_ms_[a] > split_demand_ms_[b]; });
  size_t given = 0;
  for (const size_t bucket : by_demand) {
    if (split_demand_ms_[bucket] > 0 && given < num_instances) {
      counts[bucket] = 1;
      ++given;
    }
  }
  const double total = std::accumulate(split_demand_ms_.begin(), split_demand_ms_.end(), 0.0);
  for (; given < num_instances && total > 0; ++given) {
    size_t neediest = by_demand[0];
    double largest_deficit = -1e300;
    for (const size_t bucket : by_demand) {
      if (split_demand_ms_[bucket] <= 0) continue;
      const double deficit =
          static_cast<double>(num_instances) * split_demand_ms_[bucket] / total - static_cast<double>(counts[bucket]);
      if (deficit > largest_deficit) {
        largest_deficit = deficit;
        neediest = bucket;
      }
    }
    ++counts[neediest];
  }
  return counts;
}

std::pair<size_t, size_t> LengthBuckets::instances_for(int bucket, size_t num_instances) const {
  if (!has_split_) return {0, num_instances};
  const std::array<size_t, kNumBuckets> counts = split(num_instances);
  // The nearest bucket with instances, looking at distance 0, 1, ... and the longer side first.
  int owner = bucket;
  for (int distance = 0; distance < kNumBuckets; ++distance) {
    if (bucket + distance < kNumBuckets && counts[static_cast<size_t>(bucket + distance)] > 0) {
      owner = bucket + distance;
      break;
    }
    if (bucket - distance >= 0 && counts[static_cast<size_t>(bucket - distance)] > 0) {
      owner = bucket - distance;
      break;
    }
  }
  size_t first = 0;
  for (int b = 0; b < owner; ++b) first += counts[static_cast<size_t>(b)];
  return {first, first + counts[static_cast<size_t>(owner)]};
}

}  // namespace deepinfer
