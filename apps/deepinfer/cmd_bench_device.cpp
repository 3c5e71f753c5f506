// The device benchmark. Decode points skip the prefill: each sequence's cache holds whatever the
// KV pages contain and the step reads context keys per sequence exactly as after a real prefill,
// so the timing is that of a real step. When B sequences of C tokens do not fit in memory (the KV
// cache is float32), sequences share physical pages and the line says "shared_kv": true.
#include "bench_device.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>

#include "core/clock.h"
#include "engine/generator.h"
#include "model/flop_count.h"
#include "sampling/sampler.h"

namespace deepinfer::cli {
namespace {

constexpr int32_t kBlockSize = 128;

// Pages for batch sequences of blocks_per_seq blocks: all of them, or as many as `fraction` of the
// free device memory holds (at least one sequence's), which the sequences then share: block b of
// sequence s is page (s * blocks_per_seq + b) % count. The bytes a step reads stay the same, though
// two blocks reading one page at once may find it in L2.
struct SharedPages {
  int64_t count = 0;
  std::vector<int32_t> table;  // [batch, blocks_per_seq]
  bool shared() const { return count < static_cast<int64_t>(table.size()); }
};

SharedPages shared_pages(Backend& backend, int32_t batch, int32_t blocks_per_seq, int64_t page_bytes, double fraction) {
  const std::optional<DeviceMemory> memory = backend.device_memory();
  const size_t available = memory ? memory->available_bytes() : 0;
  const auto fit = static_cast<int64_t>(static_cast<double>(available) * fraction / static_cast<double>(page_bytes));
  const int64_t wanted = int64_t{batch} * blocks_per_seq;
  SharedPages pages;
  pages.count = std::min(wanted, std::max<int64_t>(fit, blocks_per_seq));
  for (int64_t i = 0; i < wanted; ++i) pages.table.push_back(static_cast<int32_t>(i % pages.count));
  return pages;
}

std::vector<int32_t> list_or(const Args& args, const std::string& flag, std::vector<int32_t> fallback) {
  if (!args.has(flag)) return fallback;
  auto values = args.get_int_list(flag);
  return values.ok() ? *values : std::vector<int32_t>{};
}

void bench_prefill(CausalLM& model, const DevicePeaks& peaks, int32_t tokens, int32_t repeats) {
  const ModelConfig& c = model.config();
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(c.vocab_size - 1));
  std::vector<int32_t> prompt(static_cast<size_t>(tokens));
  for (int32_t& t : prompt) t = pick(rng);
  Generator generator(model, kBlockSize, tokens + 1, tokens);
  (void)generator.append({prompt.front()}, false);  // warm-up: plans, workspaces
  double best_s = 1e30;
  for (int32_t r = 0; r < repeats; ++r) {
    generator.reset();
    model.reset_expert_token_counts();
    const auto start = std::chrono::steady_clock::now();
    auto logits = generator.append(prompt, false);
    best_s = std::min(best_s, seconds_since(start));
    if (!logits.ok()) throw UserError(logits.error());
  }
  const double n = tokens;
  const double linear_flops =
      2.0 * n * decoder_matmul_params(c) + 2.0 * static_cast<double>(c.hidden_size * c.vocab_size);
  const double attention_flops = prompt_attention_flops(c, n);
  const double flop_s = (linear_flops + attention_flops) / best_s;
  std::printf(
      "{\"kind\":\"prefill\",\"tokens\":%d,\"tok_s\":%.1f,\"seconds\":%.4f,\"tflop_s\":%.1f,"
      "\"attention_flop_share\":%.3f,\"matmul_peak_tflop_s\":%.1f,\"matmul_fraction\":%.3f",
      tokens, n / best_s, best_s, flop_s / 1e12, attention_flops / (linear_flops + attention_flops),
      peaks.bf16_matmul_flop_per_s / 1e12, flop_s / peaks.bf16_matmul_flop_per_s);
  std::printf("%s}\n", expert_spread_fields(model.expert_token_counts()).c_str());
  std::fflush(stdout);
}

// Each step also draws every row's next token as a chat request would (temperature 0.8, top_k 50,
// top_p 0.95): on the device (only token ids come back), or with host_sampling every logits row is
// copied back and sampled on the host, the engine's --host-sampling path.
void bench_decode(CausalLM& model, Backend& backend, const DevicePeaks& peaks, int32_t batch, int32_t context,
                  int32_t steps, bool host_sampling) {
  const ModelConfig& c = model.config();
  // Two warm-up steps, the timed synchronous steps, then as many pipelined ones.
  const int32_t blocks_per_seq = (context + 2 * steps + 2 + kBlockSize - 1) / kBlockSize;
  model.allocate_kv_cache(KvCacheShape{1, kBlockSize});  // frees the previous point's cache first
  SharedPages pages = shared_pages(backend, batch, blocks_per_seq, model.kv_bytes_per_token() * kBlockSize, 0.85);
  const bool shared = pages.shared();
  model.allocate_kv_cache(KvCacheShape{static_cast<int32_t>(pages.count), kBlockSize});

  ForwardBatch fb;
  fb.max_blocks_per_seq = blocks_per_seq;
  fb.block_table = std::move(pages.table);
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(c.vocab_size - 1));
  std::vector<float> logits(static_cast<size_t>(batch) * static_cast<size_t>(c.vocab_size));
  SamplingParams sampling;
  sampling.temperature = 0.8;
  sampling.top_k = 50;
  sampling.top_p = 0.95;
  std::vector<kernels::SampleParams> draws(static_cast<size_t>(batch));
  std::vector<int32_t> drawn(static_cast<size_t>(batch));
  const auto set_step = [&](int32_t step) {
    const int32_t position = context + step;
    fb.token_ids.assign(static_cast<size_t>(batch), 0);
    fb.positions.assign(static_cast<size_t>(batch), position);
    fb.slot_mapping.clear();
    fb.query_start.clear();
    fb.seq_len.assign(static_cast<size_t>(batch), position + 1);
    fb.logit_rows.clear();
    for (int32_t s = 0; s < batch; ++s) {
      fb.token_ids[static_cast<size_t>(s)] = pick(rng);
      const int32_t block = fb.block_table[static_cast<size_t>(s * blocks_per_seq + position / kBlockSize)];
      fb.slot_mapping.push_back(block * kBlockSize + position % kBlockSize);
      fb.query_start.push_back(s);
      fb.logit_rows.push_back(s);
      draws[static_cast<size_t>(s)] = sample_params(sampling, 1, position + 1, 0, s);
    }
    fb.query_start.push_back(batch);
  };
  const auto run_step = [&](int32_t step) {
    set_step(step);
    if (host_sampling) {
      model.forward(fb, logits.data());
      kernels::cpu::sample_rows(logits.data(), c.vocab_size, draws.data(), batch, drawn.data());
    } else {
      model.forward_sampled(fb, draws, drawn.data(), {}, logits.data());
    }
  };
  run_step(0);
  // MoE models read the experts the batch routes to: measured on the second warm-up step.
  model.reset_expert_token_counts();
  run_step(1);
  const double weight_bytes = static_cast<double>(model.routed_weight_bytes_per_step());
  // The batch's spread over the experts in that step (a MoE layer's time follows its busiest expert).
  const std::string spread = expert_spread_fields(model.expert_token_counts());
  const int64_t replays_before = model.num_graph_replays();
  const auto start = std::chrono::steady_clock::now();
  for (int32_t i = 0; i < steps; ++i) run_step(2 + i);
  const double step_s = seconds_since(start) / steps;
  const bool graphs = model.num_graph_replays() - replays_before == steps;
  // The same steps with each one enqueued before the one ahead of it is waited for, as the
  // engine's pipelined loop (--async-scheduling, the CUDA default) runs them: the host's launch
  // hides behind the device. Not with host sampling, whose draws need the logits first.
  double pipelined_step_s = 0.0;
  if (!host_sampling) {
    std::vector<int32_t> drawn_ahead(static_cast<size_t>(batch));
    std::unique_ptr<PendingCopies> in_flight;
    const auto pipelined_start = std::chrono::steady_clock::now();
    for (int32_t i = 0; i < steps; ++i) {
      std::vector<int32_t>& out = i % 2 == 0 ? drawn : drawn_ahead;
      set_step(2 + steps + i);
      std::unique_ptr<PendingCopies> launched = model.launch_sampled(fb, draws, out.data(), {}, logits.data());
      if (in_flight) in_flight->wait();
      in_flight = std::move(launched);
    }
    in_flight->wait();
    pipelined_step_s = seconds_since(pipelined_start) / steps;
  }
  const double kv_bytes = static_cast<double>(batch) * (context + 2 + steps / 2.0) *
                          static_cast<double>(model.kv_bytes_per_token());
  const double bytes_s = (weight_bytes + kv_bytes) / step_s;
  std::printf(
      "{\"kind\":\"decode\",\"batch\":%d,\"context\":%d,\"tok_s\":%.1f,\"step_ms\":%.3f,"
      "\"weight_gb\":%.3f,\"kv_gb\":%.3f,\"achieved_tb_s\":%.3f,\"copy_peak_tb_s\":%.3f,"
      "\"bandwidth_fraction\":%.3f,\"read_peak_tb_s\":%.3f,\"read_fraction\":%.3f,\"shared_kv\":%s,"
      "\"cuda_graphs\":%s,\"sampler\":\"%s\"",
      batch, context, batch / step_s, step_s * 1e3, weight_bytes / 1e9, kv_bytes / 1e9, bytes_s / 1e12,
      peaks.copy_bytes_per_s / 1e12, bytes_s / peaks.copy_bytes_per_s, peaks.read_bytes_per_s / 1e12,
      bytes_s / peaks.read_bytes_per_s, shared ? "true" : "false", graphs ? "true" : "false",
      host_sampling ? "host" : "device");
  std::printf("%s", spread.c_str());
  if (pipelined_step_s > 0.0) {
    // Its steps read steps more tokens of KV each.
    const double pipelined_bytes_s =
        (weight_bytes + kv_bytes +
         static_cast<double>(batch) * steps * static_cast<double>(model.kv_bytes_per_token())) /
        pipelined_step_s;
    std::printf(
        ",\"pipelined_tok_s\":%.1f,\"pipelined_step_ms\":%.3f,\"pipelined_bandwidth_fraction\":%.3f,"
        "\"pipelined_read_fraction\":%.3f",
        batch / pipelined_step_s, pipelined_step_s * 1e3, pipelined_bytes_s / peaks.copy_bytes_per_s,
        pipelined_bytes_s / peaks.read_bytes_per_s);
  }
  std::printf("}\n");
  std::fflush(stdout);
}

// The attention kernel alone at decode: batch sequences of context keys, the model's head shapes
// (MLA: every head on one latent head of kv_lora_rank + rope dims, keys and values one cache), over
// a cache of the model's KV element type.
void bench_attention(Backend& backend, const ModelConfig& c, const DevicePeaks& peaks, DType cache_dtype,
                     int32_t batch, int32_t context) {
  kernels::AttentionParams params;
  params.cache_dtype = cache_dtype;
  const auto element_bytes = static_cast<int64_t>(dtype_size_bytes(params.cache_dtype));
  params.num_heads = static_cast<int32_t>(c.num_attention_heads);
  params.num_kv_heads = c.mla ? 1 : static_cast<int32_t>(c.num_key_value_heads);
  params.head_dim = static_cast<int32_t>(c.mla ? c.mla->kv_lora_rank + c.mla->qk_rope_head_dim : c.head_dim);
  params.scale = 0.08838834764f;
  const int32_t blocks_per_seq = (context + kBlockSize - 1) / kBlockSize;
  const int64_t kv_dim = int64_t{params.num_kv_heads} * params.head_dim;
  // Caches larger than the free memory share pages between sequences, as bench_decode's do.
  const SharedPages pages =
      shared_pages(backend, batch, blocks_per_seq, int64_t{kBlockSize} * kv_dim * element_bytes * (c.mla ? 1 : 2), 0.8);
  const auto cache_bytes = static_cast<size_t>(pages.count * kBlockSize * kv_dim * element_bytes);
  DeviceBuffer k_cache = backend.allocate(cache_bytes);
  DeviceBuffer v_cache = c.mla ? DeviceBuffer() : backend.allocate(cache_bytes);
  const float* values = c.mla ? k_cache.as<float>() : v_cache.as<float>();
  const auto q_floats = static_cast<size_t>(int64_t{batch} * params.num_heads * params.head_dim);
  DeviceBuffer q = backend.allocate(q_floats * sizeof(float));
  DeviceBuffer out = backend.allocate(q_floats * sizeof(float));
  const std::vector<int32_t>& table = pages.table;
  std::vector<int32_t> query_start, seq_len;
  for (int32_t s = 0; s <= batch; ++s) query_start.push_back(s);
  seq_len.assign(static_cast<size_t>(batch), context);
  DeviceBuffer d_start = backend.allocate(query_start.size() * 4);
  DeviceBuffer d_len = backend.allocate(seq_len.size() * 4);
  DeviceBuffer d_table = backend.allocate(table.size() * 4);
  backend.copy_to_device(d_start.data(), query_start.data(), query_start.size() * 4);
  backend.copy_to_device(d_len.data(), seq_len.data(), seq_len.size() * 4);
  backend.copy_to_device(d_table.data(), table.data(), table.size() * 4);
  kernels::PagedBatch pb{batch, d_start.as<int32_t>(), d_len.as<int32_t>(), d_table.as<int32_t>(), blocks_per_seq,
                         kBlockSize};
  pb.num_tokens = batch;
  pb.max_query_len = 1;
  float sink = 0.0f;
  const auto run = [&] {
    backend.paged_attention(q.as<float>(), k_cache.as<float>(), values, pb, params, out.as<float>());
  };
  run();
  backend.copy_to_host(&sink, out.data(), sizeof(float));
  constexpr int kRuns = 20;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kRuns; ++i) run();
  backend.copy_to_host(&sink, out.data(), sizeof(float));  // waits for the stream
  const double seconds = seconds_since(start) / kRuns;
  const double bytes = (c.mla ? 1.0 : 2.0) * static_cast<double>(batch) * context * static_cast<double>(kv_dim) *
                       static_cast<double>(element_bytes);
  std::printf(
      "{\"kind\":\"decode_attention\",\"batch\":%d,\"context\":%d,\"heads\":%d,\"kv_heads\":%d,"
      "\"kv_dtype\":\"%s\",\"us\":%.1f,\"effective_tb_s\":%.3f,\"copy_peak_tb_s\":%.3f,"
      "\"read_peak_tb_s\":%.3f,\"shared_kv\":%s}\n",
      batch, context, params.num_heads, params.num_kv_heads, std::string(dtype_name(params.cache_dtype)).c_str(),
      seconds * 1e6, bytes / seconds / 1e12, peaks.copy_bytes_per_s / 1e12, peaks.read_bytes_per_s / 1e12,
      pages.shared() ? "true" : "false");
  std::fflush(stdout);
}

// The attention kernel alone at prefill (one layer's call; all_layers_ms = that x num_hidden_layers):
// one sequence of `tokens` new tokens over an empty cache, the model's head shapes, bf16 allowed
// (the tensor-core kernel for 16-bit models), the model's KV element type; FLOPs counted as
// bench_prefill counts them (causal half).
// One prompt of `tokens` attending to itself: MLA models in the expanded form
// (Backend::mla_expanded_attention, its per-key expansion counted in the flops), others through
// paged_attention.
void bench_prefill_attention(Backend& backend, const ModelConfig& c, const DevicePeaks& peaks, DType cache_dtype,
                             int32_t tokens) {
  const int32_t blocks = (tokens + kBlockSize - 1) / kBlockSize;
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int32_t i = 0; i < blocks; ++i) table[static_cast<size_t>(i)] = i;
  const std::vector<int32_t> header = {0, tokens, tokens};  // query_start[0..1], seq_len[0]
  DeviceBuffer d_header = backend.allocate(header.size() * 4);
  DeviceBuffer d_table = backend.allocate(table.size() * 4);
  backend.copy_to_device(d_header.data(), header.data(), header.size() * 4);
  backend.copy_to_device(d_table.data(), table.data(), table.size() * 4);
  kernels::PagedBatch pb{1, d_header.as<int32_t>(), d_header.as<int32_t>() + 2, d_table.as<int32_t>(), blocks,
                         kBlockSize};
  pb.num_tokens = tokens;
  pb.max_query_len = tokens;
  const auto heads = static_cast<int32_t>(c.num_attention_heads);
  const auto slots = static_cast<size_t>(blocks) * kBlockSize;
  const size_t element = dtype_size_bytes(cache_dtype);
  std::function<void()> run;
  double flops = 0.0;
  DeviceBuffer q, out, k_cache, v_cache, kv_b;
  kernels::AttentionParams params;
  kernels::MlaExpandedAttention mla;
  const double pairs = static_cast<double>(tokens) * (tokens + 1.0) / 2.0;  // (query, key) pairs
  if (c.mla) {
    const MlaConfig& m = *c.mla;
    mla.num_heads = heads;
    mla.kv_lora_rank = static_cast<int32_t>(m.kv_lora_rank);
    mla.nope = static_cast<int32_t>(m.qk_nope_head_dim);
    mla.rope = static_cast<int32_t>(m.qk_rope_head_dim);
    mla.v_dim = static_cast<int32_t>(m.v_head_dim);
    mla.scale = 1.0f / std::sqrt(static_cast<float>(mla.nope + mla.rope));
    mla.cache_dtype = cache_dtype;
    const int64_t kv_b_rows = int64_t{heads} * (mla.nope + mla.v_dim);
    const std::vector<uint16_t> zeros(static_cast<size_t>(kv_b_rows * mla.kv_lora_rank), 0);
    kv_b = backend.allocate(zeros.size() * 2);
    backend.copy_to_device(kv_b.data(), zeros.data(), zeros.size() * 2);
    mla.kv_b = kernels::WeightView{kv_b.data(), DType::kBF16, kv_b_rows, mla.kv_lora_rank};
    k_cache = backend.allocate(slots * static_cast<size_t>(mla.kv_lora_rank + mla.rope) * element);
    q = backend.allocate(static_cast<size_t>(tokens) * heads * (mla.nope + mla.rope) * sizeof(float));
    out = backend.allocate(static_cast<size_t>(tokens) * heads * mla.v_dim * sizeof(float));
    mla.q = q.as<float>();
    mla.latent_cache = k_cache.data();
    mla.out = out.as<float>();
    flops = 2.0 * heads * (mla.nope + mla.rope + mla.v_dim) * pairs +
            2.0 * static_cast<double>(kv_b_rows) * mla.kv_lora_rank * tokens;
    run = [&] { backend.mla_expanded_attention(pb, mla); };
    if (!backend.mla_expanded_attention(pb, mla)) {
      // Head sizes the expanded kernel does not take (a small test model): its prompts stay absorbed.
      std::printf("{\"kind\":\"prefill_attention\",\"form\":\"mla_absorbed\",\"tokens\":%d,\"skipped\":true}\n",
                  tokens);
      std::fflush(stdout);
      return;
    }
  } else {
    params.cache_dtype = cache_dtype;
    params.num_heads = heads;
    params.num_kv_heads = static_cast<int32_t>(c.num_key_value_heads);
    params.head_dim = static_cast<int32_t>(c.head_dim);
    params.scale = 1.0f / std::sqrt(static_cast<float>(params.head_dim));
    params.allow_bf16 = true;
    const auto cache_bytes = slots * static_cast<size_t>(int64_t{params.num_kv_heads} * params.head_dim) * element;
    k_cache = backend.allocate(cache_bytes);
    v_cache = backend.allocate(cache_bytes);
    const auto q_floats = static_cast<size_t>(int64_t{tokens} * params.num_heads * params.head_dim);
    q = backend.allocate(q_floats * sizeof(float));
    out = backend.allocate(q_floats * sizeof(float));
    flops = 4.0 * params.num_heads * params.head_dim * pairs;
    run = [&] { backend.paged_attention(q.as<float>(), k_cache.data(), v_cache.data(), pb, params, out.as<float>()); };
  }
  float sink = 0.0f;
  run();
  backend.copy_to_host(&sink, out.data(), sizeof(float));
  const int runs = tokens > 8192 ? 2 : 10;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < runs; ++i) run();
  backend.copy_to_host(&sink, out.data(), sizeof(float));  // waits for the stream
  const double seconds = seconds_since(start) / runs;
  std::printf("{\"kind\":\"prefill_attention\",\"form\":\"%s\",\"tokens\":%d,\"ms\":%.3f,\"all_layers_ms\":%.1f,"
              "\"tflop_s\":%.1f,\"matmul_fraction\":%.3f}\n",
              c.mla ? "mla_expanded" : "paged", tokens, seconds * 1e3,
              seconds * 1e3 * static_cast<double>(c.num_hidden_layers), flops / seconds / 1e12,
              flops / seconds / peaks.bf16_matmul_flop_per_s);
  std::fflush(stdout);
}

}  // namespace

std::string expert_spread_fields(const ExpertTokenCounts& counts) {
  if (counts.counts.empty()) return "";
  char fields[128];
  std::snprintf(fields, sizeof(fields), ",\"busiest_tenth_expert_share\":%.3f,\"busiest_expert_over_mean\":%.2f",
                counts.busiest_share(0.1), counts.busiest_over_mean());
  return fields;
}

int run_device_bench(const Args& args, LoadedModel& loaded) {
  CausalLM& model = *loaded.model;
  Backend& backend = *loaded.backend;
  auto steps = args.get_int("--steps", 8);
  if (!steps.ok()) return report_error("bench", steps.error());
  const std::vector<int32_t> batches = list_or(args, "--batches", {1, 8, 64, 256});
  const std::vector<int32_t> contexts = list_or(args, "--contexts", {1024, 8192});
  const std::vector<int32_t> prefill = list_or(args, "--prefill", {4096});
  const std::vector<int32_t> engine_batches = list_or(args, "--engine-batches", {1, 64, 256});
  auto engine_tokens = args.get_int("--engine-tokens", 128);
  if (!engine_tokens.ok()) return report_error("bench", engine_tokens.error());
  if (batches.empty() || contexts.empty() || prefill.empty() || engine_batches.empty() || *steps < 1 ||
      *engine_tokens < 1) {
    return report_error("bench", Error{"--batches, --contexts, --prefill and --engine-batches take lists like 1,8,64; "
                                       "--steps and --engine-tokens >= 1"});
  }
  // Both loops side by side unless one is asked for.
  std::vector<bool> loops = {false, true};
  if (args.has("--async-scheduling") || args.has("--no-async-scheduling")) {
    auto pipelined = async_scheduling_from_args(args);
    if (!pipelined.ok()) return report_error("bench", pipelined.error());
    loops = {*pipelined};
  }
  const std::optional<DevicePeaks> peaks = backend.measure_peaks();
  if (!peaks) return report_error("bench", Error{"the device benchmark needs a device backend (--device cuda)"});
  const ModelConfig& c = model.config();
  std::printf("{\"kind\":\"peaks\",\"model\":\"%s\",\"device\":\"%s\",\"copy_tb_s\":%.3f,\"read_tb_s\":%.3f,"
              "\"bf16_matmul_tflop_s\":%.1f,\"weight_gb_per_step\":%.3f,\"kv_kb_per_token\":%.1f,\"kv_dtype\":\"%s\"}\n",
              c.architecture.c_str(), std::string(backend.name()).c_str(), peaks->copy_bytes_per_s / 1e12,
              peaks->read_bytes_per_s / 1e12,
              peaks->bf16_matmul_flop_per_s / 1e12, static_cast<double>(model.weight_bytes_per_token()) / 1e9,
              static_cast<double>(model.kv_bytes_per_token()) / 1024.0,
              std::string(dtype_name(model.kv_cache_dtype())).c_str());
  std::fflush(stdout);
  try {
    for (int32_t context : contexts) {
      for (int32_t batch : batches) {
        bench_decode(model, backend, *peaks, batch, context, static_cast<int32_t>(*steps), args.has("--host-sampling"));
      }
    }
    model.allocate_kv_cache(KvCacheShape{1, kBlockSize});  // the decode points' cache goes back first
    for (int32_t context : contexts) {
      for (int32_t batch : {16, 64}) bench_attention(backend, c, *peaks, model.kv_cache_dtype(), batch, context);
    }
    for (int32_t tokens : prefill) bench_prefill_attention(backend, c, *peaks, model.kv_cache_dtype(), tokens);
    for (int32_t tokens : prefill) bench_prefill(model, *peaks, tokens, tokens > 8192 ? 1 : 2);
    if (!args.has("--no-products")) {
      bench_decode_products(backend, c, *peaks);
      bench_fp8_products(backend, c, *peaks);
      bench_expert_products(backend, c, *peaks);
    }
    for (int32_t batch : batches) bench_sampling(backend, c, batch);
    // With the model's tokenizer, the same loops with one grammar-constrained request as well.
    std::optional<Tokenizer> tokenizer;
    if (auto loaded_tokenizer = Tokenizer::load(args.find("--model").value_or("")); loaded_tokenizer.ok()) {
      tokenizer = std::move(*loaded_tokenizer);
    }
    for (int32_t batch : engine_batches) {
      if (batch <= 0) continue;
      bench_engine_loops(model, nullptr, batch, static_cast<int32_t>(*engine_tokens), loops);
      if (tokenizer && batch > 1) {
        bench_engine_loops(model, &*tokenizer, batch, static_cast<int32_t>(*engine_tokens), loops);
      }
    }
  } catch (const std::exception& error) {
    return report_error("bench", Error{error.what()});
  }
  return 0;
}

}  // namespace deepinfer::cli
