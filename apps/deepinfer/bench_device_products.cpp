// The device benchmark's decode_product lines: each linear-layer shape of the model alone at a few
// decode batch sizes, as bandwidth beside the copy ceiling. Timed as a captured graph of
// back-to-back products where the backend captures, so host launch cost stays out of the figure.
// A gated_mlp line times the whole stacked feed-forward (gate|up with its activation, then down).
// Where the backend folds a layer's norms and residual adds into its decode products
// (Backend::fuses_norm_products), qkv / qkv_norm, o_proj_add and gated_mlp_norm_add lines time the
// stacked q|k|v product without and with its input norm, and the fused o and feed-forward forms.
// expert_products lines time a MoE layer's routed experts alone (issue 20's "expert products").
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bench_device.h"
#include "core/dtype.h"

namespace deepinfer::cli {
namespace {

struct ProductShape {
  const char* name;
  int64_t out_features;
  int64_t in_features;
};

constexpr int kProductsPerTiming = 20;
// The dense FP8 tensor-core peak of the H100 SXM and H200 datasheets, TFLOP/s.
constexpr double kFp8DensePeakTflops = 1979.0;

// Seconds per call of `call`, run kProductsPerTiming times back to back (as one graph where the
// backend captures); sync is device memory the calls write, read back to wait for the stream.
double seconds_per_call(Backend& backend, const std::function<void()>& call, const DeviceBuffer& sync) {
  const auto calls = [&] {
    for (int i = 0; i < kProductsPerTiming; ++i) call();
  };
  float sink = 0.0f;
  calls();  // plans and lazy set-up outside any capture
  std::unique_ptr<CapturedGraph> graph;
  if (backend.can_capture()) {
    backend.begin_capture();
    calls();
    graph = backend.end_capture();
  }
  const auto run = [&] { graph ? backend.replay(*graph) : calls(); };
  run();
  backend.copy_to_host(&sink, sync.data(), sizeof(float));
  constexpr int kRuns = 5;
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < kRuns; ++r) run();
  backend.copy_to_host(&sink, sync.data(), sizeof(float));  // waits for the stream
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
         (kRuns * kProductsPerTiming);
}

// Zero weights: the bytes moved, not their values, set the time.
TensorView zero_bf16_tensor(const char* name, int64_t rows, int64_t cols, std::vector<uint16_t>& host) {
  host.assign(static_cast<size_t>(rows * cols), 0);
  TensorView tensor;
  tensor.name = name;
  tensor.file = "(bench)";
  tensor.dtype = DType::kBF16;
  tensor.shape = {rows, cols};
  tensor.data = host.data();
  tensor.size_bytes = host.size() * sizeof(uint16_t);
  return tensor;
}

void print_product(const char* name, int64_t n, int64_t k, int64_t rows, double seconds, double bytes,
                   const DevicePeaks& peaks, bool graph) {
  std::printf("{\"kind\":\"decode_product\",\"name\":\"%s\",\"n\":%lld,\"k\":%lld,\"rows\":%lld,\"us\":%.2f,"
              "\"tb_s\":%.3f,\"copy_fraction\":%.3f,\"read_fraction\":%.3f,\"graph\":%s}\n",
              name, static_cast<long long>(n), static_cast<long long>(k), static_cast<long long>(rows), seconds * 1e6,
              bytes / seconds / 1e12, bytes / seconds / peaks.copy_bytes_per_s, bytes / seconds / peaks.read_bytes_per_s,
              graph ? "true" : "false");
  std::fflush(stdout);
}

constexpr int64_t kMaxRows = 8;
constexpr int64_t kRowCounts[] = {1, 2, 4, 8};

// The whole gated feed-forward as the model runs it where the backend stacks gate|up
// (Backend::gated_mlp): n = 3 * intermediate rows of weights read per call.
void bench_gated_mlp(Backend& backend, const ModelConfig& c, const DevicePeaks& peaks) {
  const int64_t hidden = c.hidden_size;
  const int64_t intermediate = c.intermediate_size;
  std::vector<uint16_t> gate_host, up_host, down_host;
  const TensorView gate = zero_bf16_tensor("gate_proj", intermediate, hidden, gate_host);
  const TensorView up = zero_bf16_tensor("up_proj", intermediate, hidden, up_host);
  auto gate_up = backend.load_stacked_weight({gate, up});
  if (!gate_up.ok()) throw UserError(gate_up.error());
  if (!gate_up->has_value()) return;  // this backend keeps separate products
  auto down = backend.load_weight(zero_bf16_tensor("down_proj", hidden, intermediate, down_host));
  if (!down.ok()) throw UserError(down.error());
  DeviceBuffer x = backend.allocate(static_cast<size_t>(kMaxRows * hidden) * sizeof(float));
  DeviceBuffer scratch = backend.allocate(static_cast<size_t>(2 * kMaxRows * intermediate) * sizeof(float));
  DeviceBuffer y = backend.allocate(static_cast<size_t>(kMaxRows * hidden) * sizeof(float));
  for (int64_t rows : kRowCounts) {
    const double seconds = seconds_per_call(
        backend,
        [&] {
          backend.gated_mlp(x.as<float>(), **gate_up, *down, rows, GluActivation::kSilu, scratch.as<float>(),
                            y.as<float>());
        },
        y);
    const double bytes = 3.0 * static_cast<double>(intermediate * hidden) * sizeof(uint16_t);
    print_product("gated_mlp", 3 * intermediate, hidden, rows, seconds, bytes, peaks, backend.can_capture());
  }
}

// The decode fusion's products next to their plain forms, at the row counts the backend fuses.
void bench_fused_products(Backend& backend, const ModelConfig& c, const DevicePeaks& peaks) {
  const int64_t hidden = c.hidden_size;
  const int64_t q_dim = c.num_attention_heads * c.head_dim;
  const int64_t qkv_rows = q_dim + 2 * c.num_key_value_heads * c.head_dim;
  const int64_t intermediate = c.intermediate_size;
  std::vector<uint16_t> qkv_host, o_host, norm_host, gate_host, up_host, down_host;
  auto qkv = backend.load_weight(zero_bf16_tensor("qkv_proj", qkv_rows, hidden, qkv_host));
  auto o = backend.load_weight(zero_bf16_tensor("o_proj", hidden, q_dim, o_host));
  TensorView norm_tensor = zero_bf16_tensor("input_layernorm", 1, hidden, norm_host);
  norm_tensor.shape = {hidden};
  auto norm = backend.load_weight(norm_tensor);
  auto down = backend.load_weight(zero_bf16_tensor("down_proj", hidden, intermediate, down_host));
  auto gate_up = backend.load_stacked_weight({zero_bf16_tensor("gate_proj", intermediate, hidden, gate_host),
                                              zero_bf16_tensor("up_proj", intermediate, hidden, up_host)});
  for (const auto* loaded : {&qkv, &o, &norm, &down}) {
    if (!loaded->ok()) throw UserError(loaded->error());
  }
  if (!gate_up.ok()) throw UserError(gate_up.error());
  if (!gate_up->has_value()) return;
  const NormWeights norm_weights{*norm, 0.0f, 1e-5f};
  const int64_t widest = std::max({hidden, qkv_rows, q_dim, 2 * intermediate});
  DeviceBuffer x = backend.allocate(static_cast<size_t>(kMaxRows * widest) * sizeof(float));
  DeviceBuffer normed = backend.allocate(static_cast<size_t>(kMaxRows * hidden) * sizeof(float));
  DeviceBuffer scratch = backend.allocate(static_cast<size_t>(2 * kMaxRows * intermediate) * sizeof(float));
  DeviceBuffer residual = backend.allocate(static_cast<size_t>(kMaxRows * hidden) * sizeof(float));
  DeviceBuffer y = backend.allocate(static_cast<size_t>(kMaxRows * qkv_rows) * sizeof(float));
  const double qkv_bytes = static_cast<double>(qkv_host.size() * sizeof(uint16_t));
  const double mlp_bytes = 3.0 * static_cast<double>(intermediate * hidden) * sizeof(uint16_t);
  const bool graph = backend.can_capture();
  for (int64_t rows : kRowCounts) {
    if (!backend.fuses_norm_products(rows, DType::kBF16)) continue;
    const double plain = seconds_per_call(
        backend, [&] { backend.matmul(x.as<float>(), *qkv, kernels::WeightView{}, rows, y.as<float>()); }, y);
    print_product("qkv", qkv_rows, hidden, rows, plain, qkv_bytes, peaks, graph);
    const double fused = seconds_per_call(
        backend,
        [&] { backend.norm_matmul(residual.as<float>(), norm_weights, *qkv, rows, normed.as<float>(), y.as<float>()); },
        y);
    print_product("qkv_norm", qkv_rows, hidden, rows, fused, qkv_bytes, peaks, graph);
    const double add = seconds_per_call(
        backend, [&] { backend.matmul_add(x.as<float>(), *o, rows, y.as<float>(), residual.as<float>()); }, residual);
    print_product("o_proj_add", hidden, q_dim, rows, add, static_cast<double>(o_host.size() * sizeof(uint16_t)), peaks,
                  graph);
    const double mlp = seconds_per_call(
        backend,
        [&] {
          backend.norm_gated_mlp_add(residual.as<float>(), norm_weights, **gate_up, *down, rows, GluActivation::kSilu,
                                     normed.as<float>(), scratch.as<float>(), y.as<float>());
        },
        residual);
    print_product("gated_mlp_norm_add", 3 * intermediate, hidden, rows, mlp, mlp_bytes, peaks, graph);
  }
}

// Values in [-1, 1) from a cheap generator: the prompt-sized products draw tensor-core power, and
// so clocks, by their values, which zeros would flatter; no statistical quality is needed.
float next_unit(uint64_t& state) {
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  return static_cast<float>(static_cast<int64_t>(state >> 40) - (int64_t{1} << 23)) / static_cast<float>(1 << 23);
}

// One product's FP8 and bf16 forms at each row count, on random values (FP8 codes with 128 x 128
// unit-ish block scales): one fp8_product line per row count.
void bench_fp8_product(Backend& backend, const ProductShape& shape, const std::vector<int64_t>& row_counts,
                       const DevicePeaks& peaks) {
  uint64_t state = static_cast<uint64_t>(shape.out_features * 31 + shape.in_features);
  const int64_t count = shape.out_features * shape.in_features;
  std::vector<uint8_t> codes(static_cast<size_t>(count));
  for (uint8_t& code : codes) code = static_cast<uint8_t>(f32_to_f8e4m3(next_unit(state) * 448.0f));
  const std::vector<float> scales(
      static_cast<size_t>((shape.out_features + 127) / 128 * ((shape.in_features + 127) / 128)), 1.0f / 448);
  auto fp8 = backend.load_packed_weight(kernels::WeightView{codes.data(), DType::kF8E4M3, shape.out_features,
                                                            shape.in_features, scales.data(), 128, 128});
  if (!fp8.ok()) throw UserError(fp8.error());
  std::vector<uint16_t> host;
  const TensorView tensor = zero_bf16_tensor(shape.name, shape.out_features, shape.in_features, host);
  for (uint16_t& bits : host) bits = f32_to_bf16(next_unit(state));
  auto bf16 = backend.load_weight(tensor);
  if (!bf16.ok()) throw UserError(bf16.error());
  const int64_t most_rows = *std::max_element(row_counts.begin(), row_counts.end());
  std::vector<float> x_host(static_cast<size_t>(most_rows * shape.in_features));
  for (float& v : x_host) v = next_unit(state);
  DeviceBuffer x = backend.allocate(x_host.size() * sizeof(float));
  backend.copy_to_device(x.data(), x_host.data(), x_host.size() * sizeof(float));
  DeviceBuffer y = backend.allocate(static_cast<size_t>(most_rows * shape.out_features) * sizeof(float));
  for (int64_t rows : row_counts) {
    const auto time = [&](const kernels::WeightView& w) {
      return seconds_per_call(
          backend, [&] { backend.matmul(x.as<float>(), w, kernels::WeightView{}, rows, y.as<float>()); }, y);
    };
    const double fp8_seconds = time(*fp8);
    const double bf16_seconds = time(*bf16);
    const double flop = 2.0 * static_cast<double>(rows * count);
    const double fp8_tflop_s = flop / fp8_seconds / 1e12;
    std::printf(
        "{\"kind\":\"fp8_product\",\"name\":\"%s\",\"n\":%lld,\"k\":%lld,\"rows\":%lld,\"fp8_us\":%.2f,"
        "\"bf16_us\":%.2f,\"speedup\":%.3f,\"fp8_tflop_s\":%.1f,\"bf16_tflop_s\":%.1f,"
        "\"fp8_weight_tb_s\":%.3f,\"bf16_gemm_fraction\":%.3f,\"fp8_peak_fraction\":%.3f,\"graph\":%s}\n",
        shape.name, static_cast<long long>(shape.out_features), static_cast<long long>(shape.in_features),
        static_cast<long long>(rows), fp8_seconds * 1e6, bf16_seconds * 1e6, bf16_seconds / fp8_seconds, fp8_tflop_s,
        flop / bf16_seconds / 1e12, static_cast<double>(kernels::weight_bytes(*fp8)) / fp8_seconds / 1e12,
        fp8_tflop_s * 1e12 / peaks.bf16_matmul_flop_per_s, fp8_tflop_s / kFp8DensePeakTflops,
        backend.can_capture() ? "true" : "false");
    std::fflush(stdout);
  }
}

}  // namespace

void bench_expert_products(Backend& backend, const ModelConfig& c, const DevicePeaks& peaks) {
  if (!c.moe) return;
  const int64_t hidden = c.hidden_size;
  const int64_t inter = c.moe->moe_intermediate_size;
  const auto num_experts = static_cast<int32_t>(c.moe->num_experts);
  const auto top_k = static_cast<int32_t>(c.moe->num_experts_per_tok);
  // MXFP4 and FP8 checkpoints' experts as the backend keeps them (zero codes, unit scales; FP8 in
  // the checkpoint's scale blocks), else bf16.
  const bool mxfp4 = c.mxfp4_experts && backend.reads_packed_weights(DType::kMxfp4, WeightUse::kExperts) &&
                     hidden % kernels::kMxfp4Block == 0 && inter % kernels::kMxfp4Block == 0;
  const bool fp8 = !mxfp4 && c.fp8.has_value() && backend.reads_packed_weights(DType::kF8E4M3, WeightUse::kExperts) &&
                   c.fp8->block_cols == 128 && hidden % 128 == 0 && inter % 128 == 0;
  const char* format = mxfp4 ? "mxfp4" : fp8 ? "fp8" : "bf16";
  std::vector<uint16_t> zeros;
  const TensorView gate_tensor = zero_bf16_tensor("experts.gate_proj", inter, hidden, zeros);
  TensorView down_tensor = gate_tensor;
  down_tensor.name = "experts.down_proj";
  down_tensor.shape = {hidden, inter};
  const std::vector<uint8_t> codes(static_cast<size_t>(inter * hidden), 0);
  const std::vector<uint8_t> scales(static_cast<size_t>(inter * hidden / kernels::kMxfp4Block), 127);
  // Unit FP8 scales enough for either matrix's blocks, [inter, hidden] or [hidden, inter].
  const auto fp8_view = [&](int64_t rows, int64_t cols, const float* fp8_scales) {
    return kernels::WeightView{codes.data(), DType::kF8E4M3, rows, cols, fp8_scales,
                               static_cast<int32_t>(fp8 ? c.fp8->block_rows : 1),
                               static_cast<int32_t>(fp8 ? c.fp8->block_cols : 1)};
  };
  const std::vector<float> fp8_scales(
      fp8 ? static_cast<size_t>(std::max(kernels::block_scale_count(fp8_view(inter, hidden, nullptr), inter),
                                         kernels::block_scale_count(fp8_view(hidden, inter, nullptr), hidden)))
          : 0,
      1.0f);
  const auto packed_view = [&](int64_t rows, int64_t cols) {
    if (fp8) return fp8_view(rows, cols, fp8_scales.data());
    return kernels::WeightView{codes.data(), DType::kMxfp4, rows, cols, scales.data(), 1,
                               static_cast<int32_t>(kernels::kMxfp4Block)};
  };
  std::vector<kernels::WeightView> gate, up, down;
  for (int32_t e = 0; e < num_experts; ++e) {
    for (auto [views, tensor] : {std::pair{&gate, &gate_tensor}, {&up, &gate_tensor}, {&down, &down_tensor}}) {
      auto weight = mxfp4 || fp8 ? backend.load_packed_weight(packed_view(tensor->shape[0], tensor->shape[1]))
                                 : backend.load_weight(*tensor);
      if (!weight.ok()) throw UserError(weight.error());
      views->push_back(*weight);
    }
  }
  const kernels::MoeExperts experts{.num_experts = num_experts,
                                    .top_k = top_k,
                                    .hidden = hidden,
                                    .intermediate = inter,
                                    .gate = gate.data(),
                                    .up = up.data(),
                                    .down = down.data()};
  constexpr int64_t kMaxTokens = 256;
  // Token t on experts t * top_k, ..., t * top_k + top_k - 1 (mod the count): every expert as busy
  // as the others, as many read as the batch reaches.
  std::vector<int32_t> ids(static_cast<size_t>(kMaxTokens * top_k));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i % static_cast<size_t>(num_experts));
  const std::vector<float> weights(ids.size(), 1.0f / static_cast<float>(top_k));
  DeviceBuffer ids_device = backend.allocate(ids.size() * sizeof(int32_t));
  DeviceBuffer weights_device = backend.allocate(weights.size() * sizeof(float));
  backend.copy_to_device(ids_device.data(), ids.data(), ids.size() * sizeof(int32_t));
  backend.copy_to_device(weights_device.data(), weights.data(), weights.size() * sizeof(float));
  DeviceBuffer x = backend.allocate(static_cast<size_t>(kMaxTokens * hidden) * sizeof(float));
  DeviceBuffer out = backend.allocate(static_cast<size_t>(kMaxTokens * hidden) * sizeof(float));
  DeviceBuffer workspace =
      backend.allocate(static_cast<size_t>(kernels::moe_workspace_floats(kMaxTokens, experts)) * sizeof(float));
  for (int64_t tokens : {int64_t{1}, int64_t{8}, int64_t{64}, kMaxTokens}) {
    const double seconds = seconds_per_call(
        backend,
        [&] {
          backend.moe_experts(x.as<float>(), tokens, ids_device.as<int32_t>(), weights_device.as<float>(), experts,
                              workspace.as<float>(), nullptr, out.as<float>());
        },
        out);
    const int64_t read = std::min<int64_t>(num_experts, tokens * top_k);
    const double expert_bytes = static_cast<double>(kernels::weight_bytes(gate[0]) + kernels::weight_bytes(up[0]) +
                                                    kernels::weight_bytes(down[0]));
    const double bytes = static_cast<double>(read) * expert_bytes;
    std::printf(
        "{\"kind\":\"expert_products\",\"weights\":\"%s\",\"tokens\":%lld,\"top_k\":%d,\"experts_read\":%lld,"
        "\"hidden\":%lld,\"intermediate\":%lld,\"us\":%.2f,\"tb_s\":%.3f,\"copy_fraction\":%.3f,"
        "\"read_fraction\":%.3f,\"graph\":%s}\n",
        format, static_cast<long long>(tokens), top_k, static_cast<long long>(read), static_cast<long long>(hidden),
        static_cast<long long>(inter), seconds * 1e6, bytes / seconds / 1e12, bytes / seconds / peaks.copy_bytes_per_s,
        bytes / seconds / peaks.read_bytes_per_s, backend.can_capture() ? "true" : "false");
    std::fflush(stdout);
  }
}

void bench_decode_products(Backend& backend, const ModelConfig& c, const DevicePeaks& peaks) {
  const int64_t hidden = c.hidden_size;
  const int64_t q_dim = c.num_attention_heads * c.head_dim;
  const int64_t kv_dim = c.num_key_value_heads * c.head_dim;
  const std::vector<ProductShape> shapes = {{"q_proj", q_dim, hidden},
                                            {"k_proj", kv_dim, hidden},
                                            {"o_proj", hidden, q_dim},
                                            {"gate_proj", c.intermediate_size, hidden},
                                            {"down_proj", hidden, c.intermediate_size},
                                            {"lm_head", c.vocab_size, hidden}};
  // FP8 checkpoints' projections as the backend keeps them (zero codes, unit 128 x 128 block scales).
  const bool fp8 = c.fp8.has_value() && backend.reads_packed_weights(DType::kF8E4M3, WeightUse::kMatmul);
  for (const ProductShape& shape : shapes) {
    if (fp8 && std::string_view(shape.name) != "lm_head") {
      const std::vector<uint8_t> codes(static_cast<size_t>(shape.out_features * shape.in_features), 0);
      const std::vector<float> scales(
          static_cast<size_t>((shape.out_features + 127) / 128 * ((shape.in_features + 127) / 128)), 1.0f);
      auto weight = backend.load_packed_weight(
          kernels::WeightView{codes.data(), DType::kF8E4M3, shape.out_features, shape.in_features, scales.data(),
                              static_cast<int32_t>(c.fp8->block_rows), static_cast<int32_t>(c.fp8->block_cols)});
      if (!weight.ok()) throw UserError(weight.error());
      DeviceBuffer x = backend.allocate(static_cast<size_t>(kMaxRows * shape.in_features) * sizeof(float));
      DeviceBuffer y = backend.allocate(static_cast<size_t>(kMaxRows * shape.out_features) * sizeof(float));
      const std::string name = std::string(shape.name) + "_fp8";
      for (int64_t rows : kRowCounts) {
        const double seconds = seconds_per_call(
            backend, [&] { backend.matmul(x.as<float>(), *weight, kernels::WeightView{}, rows, y.as<float>()); }, y);
        print_product(name.c_str(), shape.out_features, shape.in_features, rows, seconds,
                      static_cast<double>(kernels::weight_bytes(*weight)), peaks, backend.can_capture());
      }
    }
    std::vector<uint16_t> host;
    auto weight = backend.load_weight(zero_bf16_tensor(shape.name, shape.out_features, shape.in_features, host));
    if (!weight.ok()) throw UserError(weight.error());
    DeviceBuffer x = backend.allocate(static_cast<size_t>(kMaxRows * shape.in_features) * sizeof(float));
    DeviceBuffer y = backend.allocate(static_cast<size_t>(kMaxRows * shape.out_features) * sizeof(float));
    for (int64_t rows : kRowCounts) {
      const double seconds = seconds_per_call(
          backend, [&] { backend.matmul(x.as<float>(), *weight, kernels::WeightView{}, rows, y.as<float>()); }, y);
      const double bytes = static_cast<double>(host.size() * sizeof(uint16_t));
      print_product(shape.name, shape.out_features, shape.in_features, rows, seconds, bytes, peaks,
                    backend.can_capture());
    }
  }
  bench_gated_mlp(backend, c, peaks);
  bench_fused_products(backend, c, peaks);
}

void bench_fp8_products(Backend& backend, const ModelConfig& c, const DevicePeaks& peaks) {
  if (!c.fp8.has_value() || !backend.reads_packed_weights(DType::kF8E4M3, WeightUse::kMatmul)) return;
  const int64_t hidden = c.hidden_size;
  const int64_t q_dim = c.num_attention_heads * c.head_dim;
  const std::vector<int64_t> rows = {1, 2, 8, 16, 32, 48, 64, 65, 96, 128, 256, 1024, 4096};
  for (const ProductShape& shape :
       {ProductShape{"q_proj", q_dim, hidden}, ProductShape{"k_proj", c.num_key_value_heads * c.head_dim, hidden},
        ProductShape{"o_proj", hidden, q_dim}, ProductShape{"gate_proj", c.intermediate_size, hidden},
        ProductShape{"down_proj", hidden, c.intermediate_size}}) {
    bench_fp8_product(backend, shape, rows, peaks);
  }
  // The GEMM probe's shape (DevicePeaks::bf16_matmul_flop_per_s).
  bench_fp8_product(backend, ProductShape{"square", 8192, 8192}, {8192}, peaks);
}

}  // namespace deepinfer::cli
