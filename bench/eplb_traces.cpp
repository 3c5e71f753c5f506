// The routing traces of deepinfer-eplb-bench (see the header).
#include "eplb_traces.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <random>

#include "core/mapped_file.h"
#include "engine/generator.h"
#include "model/layers/dense_decoder.h"
#include "runtime/backend.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::bench {

namespace {

bool has_extension(const std::filesystem::path& path, const std::vector<std::string>& extensions) {
  return std::find(extensions.begin(), extensions.end(), path.extension().string()) != extensions.end();
}

}  // namespace

std::vector<std::string> list_text_files(const std::vector<std::string>& paths,
                                         const std::vector<std::string>& extensions) {
  std::vector<std::string> files;
  for (const std::string& path : paths) {
    std::error_code error;
    if (!std::filesystem::is_directory(path, error)) {
      if (std::filesystem::is_regular_file(path, error)) files.push_back(path);
      continue;
    }
    std::vector<std::string> found;
    for (auto it = std::filesystem::recursive_directory_iterator(
             path, std::filesystem::directory_options::skip_permission_denied, error);
         !error && it != std::filesystem::recursive_directory_iterator(); it.increment(error)) {
      if (it->is_regular_file(error) && has_extension(it->path(), extensions)) found.push_back(it->path().string());
    }
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

Result<std::vector<ExpertLoadWindow>> record_model_routing(const std::string& model_dir,
                                                           const std::vector<std::string>& files,
                                                           int32_t chunk_tokens, int32_t num_steps) {
  std::unique_ptr<Backend> backend;
  DI_ASSIGN(backend, make_backend("cpu", BackendOptions{}));
  std::unique_ptr<CausalLM> model;
  DI_ASSIGN(model, load_model(model_dir, *backend, /*show_progress=*/false));
  auto* decoder = dynamic_cast<DenseDecoder*>(model.get());
  if (decoder == nullptr || decoder->expert_token_counts().counts.empty()) {
    return Error{model_dir + " has no MoE layers to record routing from"};
  }
  Result<Tokenizer> tokenizer = Tokenizer::load(model_dir);
  if (!tokenizer.ok()) return tokenizer.error();

  const int64_t max_seq_tokens = model->config().max_position_embeddings;
  const int64_t tokens_per_sequence = max_seq_tokens / chunk_tokens * chunk_tokens;
  if (tokens_per_sequence == 0) return Error{"--chunk-tokens is longer than the model's context"};
  const size_t num_layers = decoder->expert_token_counts().counts.size();
  const auto num_experts = static_cast<int32_t>(decoder->expert_token_counts().counts.front().size());
  ExpertLoadRecorder recorder(static_cast<int32_t>(num_layers), num_experts, num_steps);
  Generator generator(*model, 128, max_seq_tokens, chunk_tokens);
  for (const std::string& file : files) {
    if (recorder.num_steps_recorded() >= num_steps) break;
    std::string text;
    DI_ASSIGN(text, read_text_file(file));
    Result<std::vector<int32_t>> tokens = tokenizer->encode(text);
    if (!tokens.ok()) continue;  // not UTF-8: not text this model reads
    // Whole chunks only, so every step routes the same number of tokens.
    for (int64_t begin = 0; begin + chunk_tokens <= static_cast<int64_t>(tokens->size()); begin += chunk_tokens) {
      if (begin % tokens_per_sequence == 0) generator.reset();
      decoder->reset_expert_token_counts();
      DI_TRY(generator.append(std::vector<int32_t>(tokens->begin() + begin, tokens->begin() + begin + chunk_tokens),
                              /*all_logits=*/false));
      DI_TRY(recorder.record_step(decoder->expert_token_counts().counts));
      if (recorder.num_steps_recorded() >= num_steps) break;
    }
  }
  if (recorder.num_steps_recorded() < num_steps) {
    return Error{"the text gave " + std::to_string(recorder.num_steps_recorded()) + " chunks of " +
                 std::to_string(chunk_tokens) + " tokens, fewer than the " + std::to_string(num_steps) +
                 " steps asked for: pass more text with --text"};
  }
  return recorder.windows();
}

std::vector<double> zipf_routing_probabilities(const ZipfTraceOptions& options) {
  const int32_t num_experts = options.num_experts;
  std::mt19937_64 rng(options.seed);
  std::vector<double> base(static_cast<size_t>(num_experts));
  for (int32_t i = 0; i < num_experts; ++i) base[i] = std::pow(1.0 + i, -options.zipf_exponent);
  std::shuffle(base.begin(), base.end(), rng);

  std::normal_distribution<double> normal;
  const double keep = std::exp(-1.0 / options.drift_steps);
  const double fresh = std::sqrt(1.0 - keep * keep) * options.drift_sigma;
  std::vector<double> log_drift(static_cast<size_t>(num_experts));
  for (double& z : log_drift) z = options.drift_sigma * normal(rng);

  std::vector<double> probabilities(static_cast<size_t>(options.num_steps) * num_experts);
  std::vector<double> popularity(static_cast<size_t>(num_experts));
  std::vector<int32_t> hottest_first(static_cast<size_t>(num_experts));
  for (int32_t t = 0; t < options.num_steps; ++t) {
    for (int32_t e = 0; e < num_experts; ++e) popularity[e] = base[e] * std::exp(log_drift[e]);
    // Water-filling: the hottest experts are capped at probability 1 and the rest share what is
    // left of top_k in proportion to popularity.
    std::iota(hottest_first.begin(), hottest_first.end(), 0);
    std::sort(hottest_first.begin(), hottest_first.end(),
              [&](int32_t a, int32_t b) { return popularity[a] > popularity[b]; });
    double mass = std::accumulate(popularity.begin(), popularity.end(), 0.0);
    double left = options.top_k;
    double* row = probabilities.data() + static_cast<size_t>(t) * num_experts;
    size_t capped = 0;
    while (capped < hottest_first.size() && left * popularity[hottest_first[capped]] >= mass) {
      row[hottest_first[capped]] = 1.0;
      left -= 1.0;
      mass -= popularity[hottest_first[capped]];
      ++capped;
    }
    for (size_t i = capped; i < hottest_first.size(); ++i) {
      row[hottest_first[i]] = left * popularity[hottest_first[i]] / mass;
    }
    for (double& z : log_drift) z = keep * z + fresh * normal(rng);
  }
  return probabilities;
}

ExpertLoadWindow draw_routing_trace(const std::vector<double>& probabilities, int32_t num_experts,
                                    int64_t tokens_per_step, uint64_t seed) {
  std::mt19937_64 rng(seed);
  ExpertLoadWindow trace;
  trace.num_experts = num_experts;
  trace.tokens.resize(probabilities.size());
  for (size_t i = 0; i < probabilities.size(); ++i) {
    std::binomial_distribution<int32_t> draw(static_cast<int32_t>(tokens_per_step), std::min(1.0, probabilities[i]));
    trace.tokens[i] = draw(rng);
  }
  return trace;
}

}  // namespace deepinfer::bench
