// The device benchmark's sampling lines: Backend::sample_rows alone over random logits rows of the
// model's vocabulary, per batch and filter set, so a decode step's sampling share is visible.
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "bench_device.h"
#include "sampling/sampler.h"

namespace deepinfer::cli {

void bench_sampling(Backend& backend, const ModelConfig& c, int32_t batch) {
  struct Filters {
    const char* name;
    double temperature;
    int32_t top_k;
    double top_p;
  };
  // The decode lines' chat settings, nucleus sampling alone, every token a candidate, greedy.
  const Filters sets[] = {{"t0.8_k50_p0.95", 0.8, 50, 0.95},
                          {"t1_p0.9", 1.0, 0, 0.9},
                          {"t1", 1.0, 0, 1.0},
                          {"greedy", 0.0, 0, 1.0}};
  const auto vocab = static_cast<size_t>(c.vocab_size);
  std::mt19937 rng(5);
  std::normal_distribution<float> logit(0.0f, 3.0f);
  std::vector<float> logits(static_cast<size_t>(batch) * vocab);
  for (float& value : logits) value = logit(rng);
  DeviceBuffer d_logits = backend.allocate(logits.size() * sizeof(float));
  backend.copy_to_device(d_logits.data(), logits.data(), logits.size() * sizeof(float));
  DeviceBuffer d_draws = backend.allocate(static_cast<size_t>(batch) * sizeof(kernels::SampleParams));
  DeviceBuffer d_tokens = backend.allocate(static_cast<size_t>(batch) * sizeof(int32_t));
  std::vector<int32_t> tokens(static_cast<size_t>(batch));
  for (const Filters& f : sets) {
    SamplingParams params;
    params.temperature = f.temperature;
    params.top_k = f.top_k;
    params.top_p = f.top_p;
    std::vector<kernels::SampleParams> draws;
    for (int32_t s = 0; s < batch; ++s) draws.push_back(sample_params(params, 3, 100, 0, s));
    backend.copy_to_device(d_draws.data(), draws.data(), draws.size() * sizeof(kernels::SampleParams));
    const auto run = [&] {
      backend.sample_rows(d_logits.as<float>(), c.vocab_size, d_draws.as<kernels::SampleParams>(), batch,
                          d_tokens.as<int32_t>());
    };
    run();
    backend.copy_to_host(tokens.data(), d_tokens.data(), tokens.size() * sizeof(int32_t));
    constexpr int kRuns = 10;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kRuns; ++i) run();
    backend.copy_to_host(tokens.data(), d_tokens.data(), tokens.size() * sizeof(int32_t));  // waits
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / kRuns;
    std::printf("{\"kind\":\"sampling\",\"batch\":%d,\"vocab\":%lld,\"filters\":\"%s\",\"us\":%.1f}\n", batch,
                static_cast<long long>(c.vocab_size), f.name, seconds * 1e6);
    std::fflush(stdout);
  }
}

}  // namespace deepinfer::cli
