// The device sampler (Backend::sample_rows on CUDA) against the host's sample_token: the same
// token for every draw over random, peaked, tied, masked and signed-zero logits at vocabularies
// up to Qwen's, with greedy, top_k (1, boundary ties, >= vocab), top_p, min_p and their mixes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <utility>
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

// The device's tokens for draws over logits (rows of vocab), batch draws per call.
std::vector<int32_t> draw_on_device(Backend& backend, const std::vector<float>& logits, int64_t vocab,
                                    const std::vector<kernels::SampleParams>& draws, size_t batch) {
  DeviceBuffer d_logits = upload(backend, logits);
  DeviceBuffer d_draws = upload(backend, draws);
  DeviceBuffer d_tokens = backend.allocate(draws.size() * sizeof(int32_t));
  for (size_t first = 0; first < draws.size(); first += batch) {
    backend.sample_rows(d_logits.as<float>(), vocab, d_draws.as<kernels::SampleParams>() + first,
                        static_cast<int64_t>(std::min(batch, draws.size() - first)), d_tokens.as<int32_t>() + first);
  }
  return download<int32_t>(backend, d_tokens, draws.size());
}

// Draws num_draws tokens from num_rows random rows on the device and on the host, batch draws per
// device call (0: all at once). Batches of at most half the multiprocessors split each row over
// several blocks.
void check_vocab(Backend& backend, int64_t vocab, int32_t num_rows, int32_t num_draws, uint32_t seed,
                 int32_t batch = 0) {
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
  const std::vector<int32_t> got =
      draw_on_device(backend, logits, vocab, draws, static_cast<size_t>(batch > 0 ? batch : num_draws));
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

// check_vocab for each {vocab, draws per call}: 14 rows, 140 draws, seeds from first_seed.
void check_batches(std::initializer_list<std::pair<int64_t, int32_t>> vocab_and_batch, uint32_t first_seed) {
  auto backend = cuda_backend();
  uint32_t seed = first_seed;
  for (const auto& [vocab, batch] : vocab_and_batch) check_vocab(*backend, vocab, 14, 140, seed++, batch);
}

// Few draws per call: each row split over several blocks (on 132 multiprocessors: 126 chunks of
// 1024 ids at batch 1, 16 at batch 8, 4 at batch 32; one block per draw from batch 34).
TEST(CudaSampling, SplitRowsMatchHost) { check_batches({{128256, 1}, {128256, 8}, {151936, 32}, {32000, 2}}, 8); }

// A vocabulary of one chunk (one block per row), one token past a chunk, and last chunks shorter
// than the others.
TEST(CudaSampling, SplitChunkEdgesMatchHost) {
  check_batches({{1024, 1}, {1025, 1}, {2049, 2}, {3000, 3}, {5000, 1}}, 12);
}

// Tied logits on both sides of the chunk edge at id 1024 and in the last chunk: top_k keeps the
// lowest tied ids across the edge, and u walks the draw over every inverse-CDF chunk around it.
TEST(CudaSampling, SplitTiesAcrossChunkEdgeMatchHost) {
  auto backend = cuda_backend();
  const int64_t vocab = 4000;
  std::vector<float> logits(static_cast<size_t>(vocab), -3.0f);
  for (size_t i = 1000; i < 1050; ++i) logits[i] = 2.0f;
  logits[3999] = 2.0f;
  std::vector<kernels::SampleParams> draws;
  for (int32_t top_k : {0, 2, 24, 25, 30, 51, 52, 1024}) {
    for (double top_p : {1.0, 0.5}) {
      for (double temperature : {0.5, 1.0}) {
        for (int step = 0; step < 8; ++step) {
          kernels::SampleParams draw;
          draw.top_k = top_k;
          draw.top_p = top_p;
          draw.temperature = temperature;
          draw.u = step == 7 ? std::nextafter(1.0, 0.0) : step / 7.0;
          draws.push_back(draw);
        }
      }
    }
  }
  std::vector<int32_t> want(draws.size());
  kernels::ref::sample_rows(logits.data(), vocab, draws.data(), static_cast<int64_t>(draws.size()), want.data());
  const std::vector<int32_t> got = draw_on_device(*backend, logits, vocab, draws, 1);
  for (size_t d = 0; d < draws.size(); ++d) {
    EXPECT_EQ(got[d], want[d]) << "top_k " << draws[d].top_k << " top_p " << draws[d].top_p << " T "
                               << draws[d].temperature << " u " << draws[d].u;
  }
}

// Rows that make split top_k's floor from the chunk maxima hard: maxima tied in logit (ids decide),
// every top token in one chunk (ids 40960.. open a chunk of 1024 and of 1280 ids), few finite
// logits (most maxima not kept), outliers that alone survive a low temperature, quantized and
// signed-zero ties, and Gaussian rows where min_p drops most maxima.
std::vector<float> make_floor_row(std::mt19937& rng, int64_t vocab, int shape) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(vocab));
  for (float& logit : row) logit = shape == 2 ? -std::numeric_limits<float>::infinity() : normal(rng);
  switch (shape) {
    case 0:
      for (size_t i = 0; i < row.size(); i += 700) row[i] = 4.0f;
      break;
    case 1:
      for (size_t i = 40960; i < 41260; ++i) row[i] = 5.0f + 0.25f * static_cast<float>(rng() % 17);
      break;
    case 2:
      for (int t = 0; t < 40; ++t) row[rng() % row.size()] = 2.0f * normal(rng);
      break;
    case 3:
      for (int t = 0; t < 6; ++t) row[rng() % row.size()] = 50.0f - static_cast<float>(t);
      break;
    case 4: return make_row(rng, vocab, Shape::kQuantized);
    case 5: return make_row(rng, vocab, Shape::kSignedZeros);
    default:
      for (float& logit : row) logit *= 3.0f;
  }
  return row;
}

// Split top_k draws against the host: top_k 2 .. 200 around the number of chunks (on 132
// multiprocessors at batch 1: 126 of 1024 ids at 128256, 119 of 1280 at 151936; at batches 4 and 8
// 32 and 16 chunks, where each chunk offers the floor keys after its maximum too) with top_p, min_p
// and low temperatures.
TEST(CudaSampling, SplitTopKFloorMatchesHost) {
  auto backend = cuda_backend();
  const int32_t top_ks[] = {2, 3, 5, 16, 49, 50, 51, 64, 118, 119, 126, 127, 200};
  const double temperatures[] = {0.05, 0.8, 1.5};
  const double top_ps[] = {1.0, 0.95, 0.5};
  const double min_ps[] = {0.0, 0.0, 0.05, 0.2};
  constexpr int kShapes = 7;
  for (int64_t vocab : {int64_t{128256}, int64_t{151936}}) {
    std::mt19937 rng(static_cast<uint32_t>(vocab));
    std::vector<float> logits;
    for (int shape = 0; shape < kShapes; ++shape) {
      const std::vector<float> row = make_floor_row(rng, vocab, shape);
      logits.insert(logits.end(), row.begin(), row.end());
    }
    std::vector<kernels::SampleParams> draws;
    for (int shape = 0; shape < kShapes; ++shape) {
      for (int32_t top_k : top_ks) {
        for (int rep = 0; rep < 2; ++rep) {
          kernels::SampleParams draw;
          draw.row = shape;
          draw.top_k = top_k;
          draw.temperature = temperatures[rng() % 3];
          draw.top_p = top_ps[rng() % 3];
          draw.min_p = min_ps[rng() % 4];
          draw.u = draws.size() % 9 == 4 ? std::nextafter(1.0, 0.0) : std::uniform_real_distribution<double>()(rng);
          draws.push_back(draw);
        }
      }
    }
    std::vector<int32_t> want(draws.size());
    kernels::ref::sample_rows(logits.data(), vocab, draws.data(), static_cast<int64_t>(draws.size()), want.data());
    for (size_t batch : {1, 4, 8}) {
      const std::vector<int32_t> got = draw_on_device(*backend, logits, vocab, draws, batch);
      for (size_t d = 0; d < draws.size(); ++d) {
        EXPECT_EQ(got[d], want[d]) << "vocab " << vocab << " batch " << batch << " row " << draws[d].row << " top_k "
                                   << draws[d].top_k << " T " << draws[d].temperature << " top_p " << draws[d].top_p
                                   << " min_p " << draws[d].min_p << " u " << draws[d].u;
      }
    }
  }
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
  EXPECT_EQ(draw_on_device(*backend, logits, vocab, draws, 4), (std::vector<int32_t>{17, 17, 17, 4999}));
}

}  // namespace
}  // namespace deepinfer::testing
