// The shipped default model's next-token distributions from transformers (float32, CPU; made by
// tools/reference/make_default_model_logprobs.py): per scored sequence and position, the 256 most
// likely ids and their log-probs. Shared by the CPU and CUDA fast-path checks, which run each
// sequence through the engine's default kernels and compare every position by top-1 agreement and
// by the KL divergence from the reference over those 256 ids plus one bucket for the rest of the
// vocabulary (a lower bound of the full KL; the 256 ids hold at least 90% of the mass at every position).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/generator.h"
#include "fixtures.h"
#include "model/model.h"
#include "sampling/sampler.h"

namespace deepinfer::testing {

inline std::string default_model_dir() { return std::string(DEEPINFER_TEST_DATA_DIR) + "/../../models/deepinfer-tiny-v3"; }

struct ReferenceSequence {
  std::string name;
  std::vector<int32_t> tokens;
  // Per position: the reference's top ids (most likely first) and their log-probs.
  std::vector<std::vector<int32_t>> top_ids;
  std::vector<std::vector<float>> top_logprobs;
};

inline std::vector<ReferenceSequence> load_default_model_reference() {
  const std::string dir = fixture_dir("deepinfer_tiny_v3");
  std::ifstream index_file(dir + "/top_logprobs.json");
  const nlohmann::json index = nlohmann::json::parse(index_file);
  const auto k = index["top_k"].get<size_t>();
  std::ifstream table(dir + "/top_logprobs.bin", std::ios::binary);
  std::vector<ReferenceSequence> sequences;
  for (const auto& entry : index["sequences"]) {
    ReferenceSequence seq;
    seq.name = entry["name"].get<std::string>();
    seq.tokens = entry["tokens"].get<std::vector<int32_t>>();
    table.seekg(static_cast<std::streamoff>(entry["first_row"].get<size_t>() * k * 8));
    for (size_t pos = 0; pos < seq.tokens.size(); ++pos) {
      std::vector<int32_t> ids(k);
      std::vector<float> logprobs(k);
      table.read(reinterpret_cast<char*>(ids.data()), static_cast<std::streamsize>(k * 4));
      table.read(reinterpret_cast<char*>(logprobs.data()), static_cast<std::streamsize>(k * 4));
      seq.top_ids.push_back(std::move(ids));
      seq.top_logprobs.push_back(std::move(logprobs));
    }
    if (!table) throw std::runtime_error("top_logprobs.bin is shorter than top_logprobs.json says");
    sequences.push_back(std::move(seq));
  }
  return sequences;
}

struct AgreementStats {
  int64_t positions = 0;
  int64_t top1_agreements = 0;
  double max_kl = 0.0;
  double mean_kl = 0.0;
  // The reference's smallest top-1 margin (nats) where the engine's top-1 differed; 0 when none did.
  double worst_disagreement_margin = 0.0;
};

// logits: [sequence.tokens.size(), vocab] from the engine, row i predicting token i + 1.
inline AgreementStats compare_with_reference(const ReferenceSequence& sequence, const std::vector<float>& logits,
                                             int64_t vocab) {
  AgreementStats stats;
  double kl_sum = 0.0;
  for (size_t pos = 0; pos < sequence.tokens.size(); ++pos) {
    const float* row = logits.data() + pos * static_cast<size_t>(vocab);
    const float row_max = *std::max_element(row, row + vocab);
    double sum = 0.0;
    for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(row[i]) - row_max);
    const double log_norm = row_max + std::log(sum);
    const auto& ids = sequence.top_ids[pos];
    const auto& ref = sequence.top_logprobs[pos];
    double kl = 0.0;
    double ref_mass = 0.0;
    double our_mass = 0.0;
    for (size_t j = 0; j < ids.size(); ++j) {
      const double p = std::exp(static_cast<double>(ref[j]));
      const double our_logprob = static_cast<double>(row[ids[j]]) - log_norm;
      kl += p * (static_cast<double>(ref[j]) - our_logprob);
      ref_mass += p;
      our_mass += std::exp(our_logprob);
    }
    const double ref_rest = std::max(1.0 - ref_mass, 0.0);
    const double our_rest = std::max(1.0 - our_mass, 1e-300);
    if (ref_rest > 0.0) kl += ref_rest * (std::log(ref_rest) - std::log(our_rest));
    kl = std::max(kl, 0.0);
    stats.max_kl = std::max(stats.max_kl, kl);
    kl_sum += kl;
    const auto our_top1 = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
    if (our_top1 == ids[0]) {
      ++stats.top1_agreements;
    } else {
      const double margin = static_cast<double>(ref[0] - ref[1]);
      if (stats.worst_disagreement_margin == 0.0 || margin > stats.worst_disagreement_margin) {
        stats.worst_disagreement_margin = margin;
      }
    }
    ++stats.positions;
  }
  stats.mean_kl = stats.positions > 0 ? kl_sum / static_cast<double>(stats.positions) : 0.0;
  return stats;
}

// A backend's default kernels against transformers' float32 distributions at every position of
// real code: the whole sequence as one prefill, and its second half one decode step at
// a time. The trained model's top-1 is rarely a near-tie, so every position must agree (or, for
// coarser caches, at least min_top1 of them), and bf16 activations move a distribution by little.
inline void expect_fast_path_agrees(Backend& backend, const std::string& what, double max_kl_bound,
                                    double mean_kl_bound, double min_top1 = 1.0) {
  auto model = load_model(default_model_dir(), backend, false);
  ASSERT_TRUE(model.ok()) << model.error().message;
  const int64_t vocab = (*model)->config().vocab_size;
  for (const ReferenceSequence& seq : load_default_model_reference()) {
    Generator prefill(**model, 16, static_cast<int64_t>(seq.tokens.size()));
    auto whole = prefill.append(seq.tokens, true);
    ASSERT_TRUE(whole.ok()) << whole.error().message;
    Generator decode(**model, 16, static_cast<int64_t>(seq.tokens.size()));
    const size_t half = seq.tokens.size() / 2;
    auto stepped = decode.append(std::vector<int32_t>(seq.tokens.begin(), seq.tokens.begin() + half), true);
    ASSERT_TRUE(stepped.ok()) << stepped.error().message;
    for (size_t i = half; i < seq.tokens.size(); ++i) {
      auto row = decode.append({seq.tokens[i]}, true);
      ASSERT_TRUE(row.ok()) << row.error().message;
      stepped->insert(stepped->end(), row->begin(), row->end());
    }
    for (const auto& [mode, logits] : {std::pair{"prefill", &*whole}, std::pair{"decode", &*stepped}}) {
      const AgreementStats stats = compare_with_reference(seq, *logits, vocab);
      std::printf("[fast path vs transformers] %s %s %s: %lld positions, top-1 %lld/%lld, KL max %.3g mean %.3g\n",
                  what.c_str(), seq.name.c_str(), mode, static_cast<long long>(stats.positions),
                  static_cast<long long>(stats.top1_agreements), static_cast<long long>(stats.positions), stats.max_kl,
                  stats.mean_kl);
      EXPECT_GE(static_cast<double>(stats.top1_agreements), min_top1 * static_cast<double>(stats.positions))
          << what << " " << seq.name << " " << mode << ": the reference's margin was up to "
          << stats.worst_disagreement_margin << " nats where top-1 differed";
      EXPECT_LT(stats.max_kl, max_kl_bound) << what << " " << seq.name << " " << mode;
      EXPECT_LT(stats.mean_kl, mean_kl_bound) << what << " " << seq.name << " " << mode;
    }
  }
}

// The draft module (CausalLM::forward_draft) against the training run's float32 PyTorch model
// (expected_mtp.json; transformers has no MTP): per position i, from the main model's final hidden
// state at i and token i+1, the top logprobs of token i+2 (within logprob_tolerance, absolute and
// relative) and the confidence head's estimate (within confidence_tolerance).
inline void expect_draft_module_matches(CausalLM& model, double logprob_tolerance, double confidence_tolerance) {
  std::ifstream in(fixture_dir("deepinfer_tiny_v3") + "/expected_mtp.json");
  const nlohmann::json expected = nlohmann::json::parse(in);
  ASSERT_EQ(model.num_draft_modules(), 1);
  const auto tokens = expected["tokens"].get<std::vector<int32_t>>();
  const auto n = static_cast<int32_t>(tokens.size());
  constexpr int32_t kBlock = 16;
  const int32_t num_blocks = (n + kBlock - 1) / kBlock;
  model.allocate_kv_cache(KvCacheShape{num_blocks, kBlock, 0});
  // One sequence on blocks 0, 1, ...: the main forward over every token, then the draft module
  // over positions 0 .. n - 2, each with the token after it.
  const int64_t vocab = model.config().vocab_size;
  std::vector<float> main_logits(static_cast<size_t>(n * vocab));
  model.forward(contiguous_sequence_batch(tokens, 0, num_blocks), main_logits.data());

  const ForwardBatch draft =
      contiguous_sequence_batch(std::vector<int32_t>(tokens.begin() + 1, tokens.end()), 0, num_blocks);
  std::vector<int32_t> hidden_rows(static_cast<size_t>(n - 1));
  for (int32_t p = 0; p < n - 1; ++p) hidden_rows[static_cast<size_t>(p)] = p;
  std::vector<float> logits(static_cast<size_t>((n - 1) * vocab));
  std::vector<float> confidence(static_cast<size_t>(n - 1));
  std::vector<int32_t> argmax_tokens(static_cast<size_t>(n - 1));
  model.forward_draft(draft, hidden_rows, CausalLM::DraftInput::kMainHidden,
                      {logits.data(), argmax_tokens.data(), confidence.data()});

  const auto& positions = expected["positions"];
  ASSERT_EQ(positions.size(), static_cast<size_t>(n - 1));
  for (const auto& position : positions) {
    const auto pos = position["pos"].get<size_t>();
    ASSERT_EQ(position["next_token"].get<int32_t>(), tokens[pos + 1]);
    const float* row = logits.data() + pos * static_cast<size_t>(vocab);
    float max_logit = row[0];
    for (int64_t v = 1; v < vocab; ++v) max_logit = std::max(max_logit, row[v]);
    double sum = 0.0;
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - max_logit);
    const double log_sum = max_logit + std::log(sum);
    for (const auto& entry : position["draft_top"]) {
      const auto id = static_cast<size_t>(entry[0].get<int32_t>());
      const double got = static_cast<double>(row[id]) - log_sum;
      const double want = entry[1].get<double>();
      EXPECT_LE(std::abs(got - want), logprob_tolerance * (1.0 + std::abs(want)))
          << "pos " << pos << " id " << id << ": got " << got << " want " << want;
    }
    EXPECT_NEAR(confidence[pos], position["confidence"].get<double>(), confidence_tolerance) << "pos " << pos;
    // The argmax drafted where the logits are is the argmax of the logits that came back.
    EXPECT_EQ(argmax_tokens[pos], argmax(row, vocab)) << "pos " << pos;
  }
}

}  // namespace deepinfer::testing
