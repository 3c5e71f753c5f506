// The device sampler (Backend::sample_rows on CUDA) against the host's sample_token: the same
// token for every draw over random, peaked, tied, masked and signed-zero logits at vocabularies
// up to Qwen's, with greedy, top_k (1, boundary ties, >= vocab), top_p, min_p and their mixes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "sampling/sampler.h"

namespace deepinfer::testing {
namespace {

enum class Shape { kUniform, kGaussian, kPeaked, kQuantized, kMasked, kAllEqual, kSignedZeros };

std::vector<float> make_row(std::mt19937& rng, int64_t vocab, Shape shape) {
  std::vector<float> row(static_cast<size_t>(vocab));
  std::uniform_real_distribution<float> uniform(-10.0f, 10.0f);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<int> level(0, 12);
  for (size_t i = 0; i < row.size(); ++i) {
    switch (shape) {
      case Shape::kUniform: row[i] = uniform(rng); break;
      case Shape::kGaussian: row[i] = normal(rng); break;
      case Shape::kPeaked: row[i] = normal(rng) - 20.0f; break;
      // Few distinct values: ties at every top-k / top-p boundary.
      case Shape::kQuantized: row[i] = 0.5f * static_cast<float>(level(rng)); break;
      case Shape::kMasked: row[i] = level(rng) < 9 ? -std::numeric_limits<float>::infinity() : normal(rng); break;
      case Shape::kAllEqual: row[i] = 1.25f; break;
      case Shape::kSignedZeros: row[i] = level(rng) % 2 == 0 ? 0.0f : -0.0f; break;
    }
  }
  if (shape == Shape::kPeaked) {
    for (int k = 0; k < 5 && k < vocab; ++k) row[static_cast<size_t>(rng() % vocab)] = 8.0f - static_cast<float>(k);
  }
  if (shape == Shape::kMasked) row[static_cast<size_t>(rng() % vocab)] = 2.0f;  // at least one finite
  return row;
}

SamplingParams random_params(std::mt19937& rng, int64_t vocab) {
  const double temperatures[] = {0.0, 0.3, 0.7, 1.0, 1.7};
  // 1024 and 1025: the largest top_k of the device's kept-tokens-only path and the first beyond it.
  const int32_t top_ks[] = {0, 0, 1, 2, 5, 50, static_cast<int32_t>(vocab) - 1, static_cast<int32_t>(vocab),
                            static_cast<int32_t>(vocab) + 3, 1024, 1025};
  const double top_ps[] = {1.0, 1.0, 0.95, 0.9, 0.5, 0.1, 1e-6};
  const double min_ps[] = {0.0, 0.0, 0.0, 0.01, 0.2, 1.0};
  SamplingParams p;
  p.temperature = temperatures[rng() % 5];
  p.top_k = std::max(top_ks[rng() % 11], 0);
  p.top_p = top_ps[rng() % 7];
  p.min_p = min_ps[rng() % 6];
  return p;
}

std::string describe(const SamplingParams& p, const kernels::SampleParams& draw, Shape shape) {
  return "T " + std::to_string(p.temperature) + " top_k " + std::to_string(p.top_k) + " top_p " +
         std::to_string(p.top_p) + " min_p " + std::to_string(p.min_p) + " u " + std::to_string(draw.u) +
         " row " + std::to_string(draw.row) + " shape " + std::to_string(static_cast<int>(shape));
}

// Draws num_draws tokens from num_rows random rows on the device and on the host.
void check_vocab(Backend& backend, int64_t vocab, int32_t num_rows, int32_t num_draws, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> logits;
  std::vector<Shape> shapes;
  for (int32_t r = 0; r < num_rows; ++r) {
    shapes.push_back(static_cast<Shape>(r % 7));
    const std::vector<float> row = make_row(rng, vocab, shapes.back());
    logits.insert(logits.end(), row.begin(), row.end());
  }
  std::vector<SamplingParams> params;
  std::vector<kernels::SampleParams> draws;
  std::vector<int32_t> want;
  for (int32_t d = 0; d < num_draws; ++d) {
    params.push_back(random_params(rng, vocab));
    const auto row = static_cast<int32_t>(rng() % static_cast<uint32_t>(num_rows));
    draws.push_back(sample_params(params.back(), seed, d, d % 3, row));
    // The draw's extremes: the first and the last token that can be drawn.
    if (d % 11 == 5) draws.back().u = 0.0;
    if (d % 11 == 7) draws.back().u = std::nextafter(1.0, 0.0);
    int32_t token = 0;
    kernels::ref::sample_rows(logits.data(), vocab, &draws.back(), 1, &token);
    if (d % 11 != 5 && d % 11 != 7) {  // the oracle is sample_token itself
      EXPECT_EQ(token, sample_token(logits.data() + int64_t{row} * vocab, vocab, params.back(), seed, d, d % 3));
    }
    want.push_back(token);
  }
  DeviceBuffer d_logits = upload(backend, logits);
  DeviceBuffer d_draws = backend.allocate(draws.size() * sizeof(kernels::SampleParams));
  backend.copy_to_device(d_draws.data(), draws.data(), draws.size() * sizeof(kernels::SampleParams));
  DeviceBuffer d_tokens = backend.allocate(draws.size() * sizeof(int32_t));
  backend.sample_rows(d_logits.as<float>(), vocab, d_draws.as<kernels::SampleParams>(), num_draws,
                      d_tokens.as<int32_t>());
  const std::vector<int32_t> got = download<int32_t>(backend, d_tokens, draws.size());
  int mismatches = 0;
  for (size_t d = 0; d < draws.size(); ++d) {
    if (got[d] != want[d] && ++mismatches <= 10) {
      ADD_FAILURE() << "vocab " << vocab << " draw " << d << ": device " << got[d] << ", host " << want[d] << " ("
                    << describe(params[d], draws[d], shapes[static_cast<size_t>(draws[d].row)]) << ")";
    }
  }
  EXPECT_EQ(mismatches, 0) << "vocab " << vocab;
}

TEST(CudaSampling, SmallVocabulariesMatchHost) {
  auto backend = cuda_backend();
  check_vocab(*backend, 1, 7, 40, 1);
  check_vocab(*backend, 2, 7, 60, 2);
  check_vocab(*backend, 7, 14, 200, 3);
  check_vocab(*backend, 1000, 21, 400, 4);
}

TEST(CudaSampling, LargeVocabulariesMatchHost) {
  auto backend = cuda_backend();
  check_vocab(*backend, 32000, 14, 300, 5);
  check_vocab(*backend, 128256, 14, 300, 6);  // Llama 3: more draws than multiprocessors
  check_vocab(*backend, 151936, 7, 120, 7);   // Qwen
}

// Greedy is argmax with the lowest id among equal maxima; one-token survivors of every filter.
TEST(CudaSampling, GreedyAndSingleSurvivorsTakeTheLowestTiedId) {
  auto backend = cuda_backend();
  const int64_t vocab = 5000;
  std::vector<float> logits(static_cast<size_t>(vocab), -1.0f);
  for (int64_t i : {4321, 17, 999, 4999}) logits[static_cast<size_t>(i)] = 3.0f;
  std::vector<kernels::SampleParams> draws(4);
  draws[0].temperature = 0.0;
  draws[1].top_k = 1;
  draws[2].top_p = 1e-9;  // the first of the tied maxima only
  draws[2].u = 0.99;
  draws[3].min_p = 1.0;  // every maximum survives; u near 1 picks the last one
  draws[3].u = 0.999;
  DeviceBuffer d_logits = upload(*backend, logits);
  DeviceBuffer d_draws = backend->allocate(draws.size() * sizeof(kernels::SampleParams));
  backend->copy_to_device(d_draws.data(), draws.data(), draws.size() * sizeof(kernels::SampleParams));
  DeviceBuffer d_tokens = backend->allocate(draws.size() * sizeof(int32_t));
  backend->sample_rows(d_logits.as<float>(), vocab, d_draws.as<kernels::SampleParams>(), 4, d_tokens.as<int32_t>());
  EXPECT_EQ(download<int32_t>(*backend, d_tokens, 4), (std::vector<int32_t>{17, 17, 17, 4999}));
}

}  // namespace
}  // namespace deepinfer::testing
