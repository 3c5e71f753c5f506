// Percentiles of a sample, for the latency figures of the benchmarks and the simulators.
#pragma once

#include <vector>

namespace deepinfer {

// The p-th percentile (p in [0, 100]) by linear interpolation between the closest ranks (numpy's
// default); 0 for an empty sample. Takes the sample by value because it sorts it.
double percentile(std::vector<double> values, double p);

}  // namespace deepinfer
