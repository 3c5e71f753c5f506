// `deepinfer bench`: prefill and decode speed at batch 1 on random prompt tokens, with the
// decode weight-read bandwidth as a fraction of the memory read bandwidth measured in the same run.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <random>

#include "bench_device.h"
#include "bench_speculative.h"
#include "commands.h"
#include "core/clock.h"
#include "core/memory_bandwidth.h"
#include "runtime/cpu/op_profile.h"
#include "engine/generator.h"
#include "session.h"

namespace deepinfer::cli {
namespace {

constexpr const char* kUsage = R"(usage: deepinfer bench --model DIR [--prompt-tokens N] [--decode-tokens N] [--repeats R]
                       [--device cpu|ref|cuda] [--threads N] [--batch-invariant] [--profile]
                       [--kv-cache-dtype auto|float32|bfloat16|fp8]
                       [--no-cuda-graphs] [--no-fused-decode] [--no-products] [--host-sampling] [--dequantize-weights]
                       [--batches LIST] [--contexts LIST] [--prefill LIST] [--steps N]
                       [--engine-batches LIST] [--engine-tokens N] [--[no-]async-scheduling]  (cuda)
       deepinfer bench --model DIR --speculative-tokens K (--draft-text FILE | --draft-replay RATE)
                       [--draft-prompts N] [--prompt-tokens N] [--decode-tokens N] [--device cpu|ref|cuda]
                       [--concurrency LIST [--[no-]async-scheduling]]
Runs a prompt of N random tokens (default 128) and then N greedy decode steps (default 32),
R times (default 3, best run kept), and prints one JSON line: prefill and decode tokens/s, the
weight bytes one decode step reads, the achieved decode bandwidth, the machine's memory read
bandwidth measured in the same run, and their ratio. --batch-invariant runs the kernels whose
results do not depend on the batch (slower prefill; see docs/benchmarks.md). --profile (cpu, ref)
also prints to stderr each op's time per decode step over all repeats, with the fork/join cost of
one OpenMP parallel region (DEEPINFER_PROFILE=1 profiles any command). With --device cuda:
decode at each batch x context, the decode attention kernel, and prefill at each length, one JSON
line each, beside the GPU's copy bandwidth and bf16 GEMM rate measured in the same run; decode
lines say whether the steps replayed CUDA graphs ("cuda_graphs"; --no-cuda-graphs: op by op) and
where each step drew its tokens (temperature 0.8, top_k 50, top_p 0.95; "sampler": device, or host
with --host-sampling: every logits row copied back and sampled on the host) and, with the device
sampler, the same steps pipelined (each enqueued before the one ahead of it is waited for, as the
engine's --async-scheduling loop runs them: "pipelined_tok_s" and its bandwidth fractions);
decode_product lines time each linear-layer shape alone at 1-8 rows, and for a MoE model
expert_products lines its routed experts' shapes alone at 1-256 tokens, in MXFP4 or FP8 where the
checkpoint's experts are and the backend reads them packed, else bf16, and for an FP8 checkpoint
fp8_product lines its projections (and an 8192^3 product) at 16-4096 rows in FP8 and bf16 side
by side on random values, TFLOP/s beside the bf16 GEMM rate and the FP8 datasheet peak of 1979
(--no-products skips them all).
--dequantize-weights: FP8 and MXFP4 weights load dequantised instead of packed.
--no-fused-decode (cuda): decode steps of 1-2 sequences keep residual adds and norms as their own
kernels (the unfused sequence, to measure the fusion against). Last, engine_loop lines: at each
--engine-batches size (default 1,64,256; 0 skips) that many requests of 32 random prompt tokens
sample --engine-tokens tokens each (default 128) through the engine's step loop, synchronous and
pipelined side by side (median tokens/s of 3 runs each, and their ratio), and when the model has
a tokenizer again with one of them constrained by a regex (grammar masks on the host);
--async-scheduling or --no-async-scheduling runs only that loop.
With --speculative-tokens K and --draft-text FILE (a model with a draft module, DeepSeek's MTP):
greedy speculative decoding of one sequence at a time, K drafts a round from the draft module and
one verifying forward of the model, against plain greedy decoding, alternating over the same
prompts (--draft-prompts of --prompt-tokens tokens cut from FILE's text, default 16 of 64;
--decode-tokens each, default 64). Prints a speculative line (tokens/s of both, the speedup, the
ideal speedup from the measured acceptance and costs: tokens a round / (1 + draft time a round /
plain time a token), the accepted-drafts histogram, whether the outputs are identical) and a
draft_calibration line per depth: acceptance given the earlier drafts were accepted, the
confidence head's mean, ECE (10 bins), AUROC and Brier score beside a constant predictor's.
With --draft-replay RATE instead of --draft-text (any model, e.g. random weights): random prompts,
and each draft is the token the verifier itself chose for that position in an untimed run with
every draft rejected, replaced by another with probability RATE; drafts cost nothing, so the
speedup is the verification's alone.
With --concurrency LIST (and --draft-text): the engine's speculative decoding instead. At each
concurrency (e.g. 1,16,64,256) that many greedy requests of the text's prompts (reused in turn)
run through the engine with drafts off, with K drafts and DSpark's varlen budget, and with fixed
K, alternating, median tokens/s of 3 runs each after a warm-up; one speculative_engine line per
concurrency: the speedups, the ideal (tokens a sequence gains per step / (1 + draft time per step
/ plain step time)), verify rows per step, steps after which drafting did not pay, and how many
outputs equal plain decoding's. Every engine runs the pipelined step loop where serve would (the
default with --device cuda; --[no-]async-scheduling picks), so plain decoding pipelines and the
varlen engine pipelines the steps it does not draft for. With --draft-replay RATE instead of --draft-text: random prompts,
and each request's drafts replayed from the warm-up's plain outputs, corrupted at RATE (drafting
costs nothing), on any model: verification's cost in the engine at each concurrency.
)";

}  // namespace

int run_bench(int argc, char** argv) {
  if (wants_help(argc, argv, kUsage)) return 0;
  auto args = Args::parse(argc, argv, model_value_flags({"--prompt-tokens", "--decode-tokens", "--repeats", "--batches",
                                                       "--contexts", "--prefill", "--steps", "--engine-batches",
                                                       "--engine-tokens", "--speculative-tokens", "--draft-text",
                                                       "--draft-prompts", "--draft-replay", "--concurrency"}),
                          model_bool_flags({"--no-products", "--profile", "--no-fused-decode", "--async-scheduling",
                                            "--no-async-scheduling"}));
  if (!args.ok()) return report_error("bench", args.error());
  const bool drafts_given = args->has("--draft-text") || args->has("--draft-replay");
  if (args->has("--speculative-tokens") != drafts_given || (args->has("--draft-text") && args->has("--draft-replay"))) {
    return report_error("bench", Error{"--speculative-tokens takes one of --draft-text FILE or --draft-replay RATE"});
  }
  if (drafts_given) {
    auto loaded = load_model_from_args(*args);
    if (!loaded.ok()) return report_error("bench", loaded.error());
    return run_speculative_bench(*args, *loaded);
  }
  auto prompt_tokens = args->get_int("--prompt-tokens", 128);
  auto decode_tokens = args->get_int("--decode-tokens", 32);
  auto repeats = args->get_int("--repeats", 3);
  for (const auto* value : {&prompt_tokens, &decode_tokens, &repeats}) {
    if (!value->ok()) return report_error("bench", value->error());
    if (**value < 1) return report_error("bench", Error{"--prompt-tokens, --decode-tokens and --repeats must be >= 1"});
  }
  auto loaded = load_model_from_args(*args);
  if (!loaded.ok()) return report_error("bench", loaded.error());
  if (loaded->backend->device_memory()) return run_device_bench(*args, *loaded);
  CausalLM& model = *loaded->model;
  const int64_t vocab = model.config().vocab_size;

  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> prompt(static_cast<size_t>(*prompt_tokens));
  for (int32_t& t : prompt) t = pick(rng);

  Generator generator(model, 128, *prompt_tokens + *decode_tokens, static_cast<int32_t>(*prompt_tokens));
  (void)generator.append({prompt.front()}, false);  // warm-up: first-touch of weights and caches
  double best_prefill_s = 1e30;
  double best_decode_s = 1e30;
  const bool profile = args->has("--profile");
  OpProfile& op_profile = OpProfile::global();
  op_profile.reset();
  double profiled_decode_s = 0.0;
  ExpertTokenCounts prompt_routing;
  for (int64_t r = 0; r < *repeats; ++r) {
    generator.reset();
    model.reset_expert_token_counts();
    const auto prefill_start = std::chrono::steady_clock::now();
    auto logits = generator.append(prompt, false);
    best_prefill_s = std::min(best_prefill_s, seconds_since(prefill_start));
    if (!logits.ok()) return report_error("bench", logits.error());
    prompt_routing = model.expert_token_counts();
    if (profile) op_profile.set_enabled(true);
    const auto decode_start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < *decode_tokens; ++i) {
      logits = generator.append({argmax(logits->data(), vocab)}, false);
      if (!logits.ok()) return report_error("bench", logits.error());
    }
    const double decode_s = seconds_since(decode_start);
    if (profile) op_profile.set_enabled(false);
    profiled_decode_s += decode_s;
    best_decode_s = std::min(best_decode_s, decode_s);
  }
  if (profile) {
    const int64_t steps = *repeats * *decode_tokens;
    std::fprintf(stderr, "decode profile, %lld steps, %.3f ms per step, %d threads:\n%s",
                 static_cast<long long>(steps), 1e3 * profiled_decode_s / static_cast<double>(steps),
                 omp_get_max_threads(), op_profile.report(steps, profiled_decode_s).c_str());
    std::fprintf(stderr, "one empty OpenMP parallel region (fork + join): %.2f us\n", measure_parallel_region_us(15));
  }
  const double memory_gb_s = measure_read_bandwidth_gbps(size_t{1} << 30, 5);
  const double prefill_tok_s = static_cast<double>(*prompt_tokens) / best_prefill_s;
  const double decode_tok_s = static_cast<double>(*decode_tokens) / best_decode_s;
  const auto bytes_per_token = static_cast<double>(model.weight_bytes_per_token());
  const double decode_gb_s = bytes_per_token * decode_tok_s / 1e9;
  std::printf(
      "{\"model\":\"%s\",\"device\":\"%s\",\"threads\":%d,\"prefill_tokens\":%lld,\"prefill_tok_s\":%.2f,"
      "\"decode_tokens\":%lld,\"decode_tok_s\":%.3f,\"weight_bytes_per_token\":%.0f,\"decode_gb_s\":%.3f,"
      "\"memory_read_gb_s\":%.3f,\"decode_bandwidth_ratio\":%.4f,\"kv_cache_dtype\":\"%s\"%s}\n",
      model.config().architecture.c_str(), std::string(model.backend().name()).c_str(), omp_get_max_threads(),
      static_cast<long long>(*prompt_tokens), prefill_tok_s, static_cast<long long>(*decode_tokens), decode_tok_s,
      bytes_per_token, decode_gb_s, memory_gb_s, decode_gb_s / memory_gb_s,
      std::string(dtype_name(model.kv_cache_dtype())).c_str(), expert_spread_fields(prompt_routing).c_str());
  return 0;
}

}  // namespace deepinfer::cli
