// Routing traces for deepinfer-eplb-bench: the default model's real per-step expert counts over
// text, and synthetic DeepSeek-V3-shaped traces (256 experts, top-8) with Zipf-skewed, slowly
// drifting expert popularity.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"
#include "parallel/expert_load.h"

namespace deepinfer::bench {

// Runs the model in model_dir on the CPU over the text of files (in order), one step per chunk
// of chunk_tokens consecutive tokens of one file (a file is a sequence, restarted every
// max_seq_tokens), until num_steps steps; returns each MoE layer's counts, oldest step first.
// Errors when the model has no MoE layers or the text gives fewer than num_steps chunks.
Result<std::vector<ExpertLoadWindow>> record_model_routing(const std::string& model_dir,
                                                           const std::vector<std::string>& files,
                                                           int32_t chunk_tokens, int32_t num_steps);

// The regular files under each path (a file, or a directory searched recursively for names
// ending in one of extensions), each directory's files in sorted order.
std::vector<std::string> list_text_files(const std::vector<std::string>& paths,
                                         const std::vector<std::string>& extensions);

struct ZipfTraceOptions {
  int32_t num_experts = 256;
  int32_t top_k = 8;
  double zipf_exponent = 1.0;   // expert i of a random order has popularity (i + 1)^-s
  int32_t num_steps = 2000;
  // Each expert's log-popularity drifts as an Ornstein-Uhlenbeck process: stationary standard
  // deviation drift_sigma, correlation time drift_steps (e^-1 after that many steps).
  double drift_sigma = 0.3;
  double drift_steps = 5000;
  uint64_t seed = 1;
};

// [num_steps, num_experts] the probability that a token routes to each expert in each step: the
// popularity water-filled so no expert exceeds 1 (a token picks top_k distinct experts) and each
// row sums to top_k.
std::vector<double> zipf_routing_probabilities(const ZipfTraceOptions& options);

// Per step and expert, tokens_per_step tokens each routed to the expert with its probability
// (independent binomial draws; a step's sum is top_k * tokens_per_step on average).
ExpertLoadWindow draw_routing_trace(const std::vector<double>& probabilities, int32_t num_experts,
                                    int64_t tokens_per_step, uint64_t seed);

}  // namespace deepinfer::bench
