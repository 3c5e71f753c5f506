// Request traces in the Mooncake format (FAST'25 release): one JSON object a line with the arrival
// `timestamp` (ms), `input_length`, `output_length` and `hash_ids`, the prompt's 512-token prefix
// block chain (bench/data/README.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"

namespace deepinfer {

struct TraceRequest {
  double timestamp_ms = 0;
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  std::vector<uint64_t> block_hashes;  // entry k: block k with everything before it
};

// Reads up to max_requests records (all when max_requests <= 0). Blank lines are skipped. A line
// that is not such a record (not JSON, a field missing or of the wrong type, a negative length, no
// output token, a timestamp earlier than the line before) is an error naming the file and line.
Result<std::vector<TraceRequest>> read_mooncake_trace(const std::string& path, int64_t max_requests);

}  // namespace deepinfer
