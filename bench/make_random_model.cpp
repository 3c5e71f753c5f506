// deepinfer-make-random-model: writes a Hugging Face checkpoint (config.json + model.safetensors)
// shaped like a Llama / Mistral / Qwen2 / Qwen3 model, or a MoE one (DeepSeek-V2/V3, Qwen3-MoE,
// Mixtral, GPT-OSS), with random weights, for benchmarks.
// Usage: deepinfer-make-random-model --config CONFIG.json --out DIR [--dtype bf16|f32|f16|fp8|mxfp4] [--seed N]
//        [--router-skew SHARE]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "dense_layout.h"
#include "moe_layout.h"
#include "router_skew.h"
#include "tool_flags.h"
#include "weights/fp8.h"
#include "weights/safetensors.h"

namespace deepinfer::bench {
namespace {

constexpr const char* kUsage =
    "usage: deepinfer-make-random-model --config CONFIG.json --out DIR [--dtype bf16|f32|f16|fp8|mxfp4]\n"
    "                                   [--seed N] [--router-skew SHARE]\n"
    "Writes DIR/config.json and DIR/model.safetensors with every tensor of the config's architecture\n"
    "(Llama, Mistral, Qwen2, Qwen3; DeepSeek-V2/V3, Qwen3-MoE, Mixtral, GPT-OSS): weights ~ normal(0, 0.02),\n"
    "norm weights ~ 1 + normal(0, 0.02). fp8: the projections in e4m3 with a float32 weight_scale_inv per\n"
    "128 x 128 block (DeepSeek-V3's published format), everything else bf16. mxfp4 (GPT-OSS): the experts\n"
    "as e2m1 codes ~ uniform with an e8m0 scale of 2^-7 per 32 (GPT-OSS's published format, an RMS near\n"
    "0.02), everything else bf16.\n"
    "--router-skew SHARE (MoE, e.g. 0.5): router biases drawn so that the busiest tenth of each layer's\n"
    "experts takes SHARE of the routed tokens (GPT-OSS's router bias; other families need\n"
    "\"topk_method\": \"noaux_tc\" in the config, whose e_score_correction_bias steers the choice).\n";

constexpr float kWeightStd = 0.02f;  // transformers' default initializer_range
// The unit of parallel work. Each chunk draws from its own stream seeded by (seed, tensor, chunk),
// so the weights do not depend on the number of threads.
constexpr int64_t kChunkElements = int64_t{1} << 20;

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// SplitMix64: a one-word generator, fast and plenty for weights nobody trains.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() { return mix64(state_ += 0x9e3779b97f4a7c15ull); }

 private:
  uint64_t state_;
};

// Two independent standard normals from one 64-bit draw (Box-Muller on two 24-bit uniforms).
std::pair<float, float> normal_pair(uint64_t bits) {
  const float u1 = (static_cast<float>(bits >> 40) + 1.0f) * 0x1p-24f;         // (0, 1]
  const float u2 = static_cast<float>((bits >> 8) & 0xffffffu) * 0x1p-24f;      // [0, 1)
  const float radius = std::sqrt(-2.0f * std::log(u1));
  const float angle = 6.28318530718f * u2;
  return {radius * std::cos(angle), radius * std::sin(angle)};
}

void store(void* dst, DType dtype, int64_t index, float value) {
  switch (dtype) {
    case DType::kBF16: static_cast<uint16_t*>(dst)[index] = f32_to_bf16(value); return;
    case DType::kF16: static_cast<uint16_t*>(dst)[index] = f32_to_f16(value); return;
    default: static_cast<float*>(dst)[index] = value; return;
  }
}

struct Chunk {
  size_t tensor_index;
  int64_t begin;
  int64_t end;
};

// MXFP4 experts: uniform e2m1 codes (RMS 2.93) times 2^(kMxfp4Scale - 127).
constexpr uint8_t kMxfp4Scale = 120;

void fill_chunk(const Chunk& chunk, const DenseTensor& spec, TensorView& view, uint64_t seed) {
  SplitMix64 rng(mix64(seed ^ mix64((static_cast<uint64_t>(chunk.tensor_index) << 32) ^
                                    static_cast<uint64_t>(chunk.begin / kChunkElements))));
  const float mean = spec.role == TensorRole::kNorm ? 1.0f : 0.0f;
  void* dst = const_cast<void*>(view.data);
  if (view.dtype == DType::kU8) {  // MXFP4 codes or scales
    auto* bytes = static_cast<uint8_t*>(dst);
    const bool scales = spec.hf_name.ends_with("_scales");
    for (int64_t i = chunk.begin; i < chunk.end; ++i) {
      bytes[i] = scales ? kMxfp4Scale : static_cast<uint8_t>(rng.next() >> 56);
    }
    return;
  }
  for (int64_t i = chunk.begin; i < chunk.end; i += 2) {
    const auto [a, b] = normal_pair(rng.next());
    store(dst, view.dtype, i, mean + kWeightStd * a);
    if (i + 1 < chunk.end) store(dst, view.dtype, i + 1, mean + kWeightStd * b);
  }
}

// Fills every tensor on all cores.
void fill_all(const std::vector<DenseTensor>& specs, std::vector<TensorView>& views, uint64_t seed) {
  std::vector<Chunk> chunks;
  for (size_t t = 0; t < views.size(); ++t) {
    const int64_t numel = views[t].numel();
    for (int64_t begin = 0; begin < numel; begin += kChunkElements) {
      chunks.push_back({t, begin, std::min(numel, begin + kChunkElements)});
    }
  }
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t c = next++; c < chunks.size(); c = next++) {
      fill_chunk(chunks[c], specs[chunks[c].tensor_index], views[chunks[c].tensor_index], seed);
    }
  };
  std::vector<std::thread> threads;
  const unsigned num_threads = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < num_threads; ++i) threads.emplace_back(worker);
  for (std::thread& thread : threads) thread.join();
}

Result<DType> parse_dtype(const std::string& name) {
  if (name == "bf16") return DType::kBF16;
  if (name == "f16") return DType::kF16;
  if (name == "f32") return DType::kF32;
  if (name == "fp8") return DType::kF8E4M3;
  if (name == "mxfp4") return DType::kMxfp4;
  return Error{"--dtype must be bf16, f16, f32, fp8 or mxfp4, got '" + name + "'"};
}

// GPT-OSS's experts [num_experts, in, out] as its MXFP4 checkpoints publish them: `_blocks` U8
// [num_experts, out, in / 32, 16] and `_scales` U8 [num_experts, out, in / 32].
Result<void> split_mxfp4_experts(std::vector<DenseTensor>& tensors) {
  std::vector<DenseTensor> out;
  bool any = false;
  for (DenseTensor& spec : tensors) {
    const bool expert =
        spec.hf_name.ends_with("mlp.experts.gate_up_proj") || spec.hf_name.ends_with("mlp.experts.down_proj");
    if (!expert) {
      out.push_back(std::move(spec));
      continue;
    }
    if (spec.shape.size() != 3 || spec.shape[1] % 32 != 0) {
      return Error{spec.hf_name + ": MXFP4 experts need [experts, in, out], in a multiple of 32"};
    }
    const int64_t in = spec.shape[1];
    DenseTensor blocks = spec;
    blocks.hf_name += "_blocks";
    blocks.shape = {spec.shape[0], spec.shape[2], in / 32, 16};
    DenseTensor scales = spec;
    scales.hf_name += "_scales";
    scales.shape = {spec.shape[0], spec.shape[2], in / 32};
    out.push_back(std::move(blocks));
    out.push_back(std::move(scales));
    any = true;
  }
  if (!any) return Error{"--dtype mxfp4 takes GPT-OSS configs (mlp.experts.gate_up_proj / down_proj)"};
  tensors = std::move(out);
  return {};
}

// DeepSeek-V3's FP8 checkpoints quantise the projections; embeddings, the output head, norms, biases
// and routers stay 16-bit.
constexpr int64_t kFp8Block = 128;
bool is_fp8_projection(const DenseTensor& spec) {
  const auto ends_with = [&](std::string_view suffix) { return spec.hf_name.ends_with(suffix); };
  return spec.role == TensorRole::kMatrix && spec.shape.size() == 2 &&
         (ends_with("_proj.weight") || ends_with("_proj_with_mqa.weight")) &&
         spec.hf_name.find("embed") == std::string::npos;
}

// Replaces every float32 tensor of views (the FP8 projections) by its e4m3 codes and appends its
// weight_scale_inv, on all cores.
void quantize_projections(std::vector<TensorView>& views, std::vector<std::unique_ptr<uint8_t[]>>& buffers) {
  std::vector<size_t> projections;
  for (size_t t = 0; t < views.size(); ++t) {
    if (views[t].dtype == DType::kF32) projections.push_back(t);
  }
  const auto scale_shape = [&](size_t t) {
    return std::vector<int64_t>{(views[t].shape[0] + kFp8Block - 1) / kFp8Block,
                                (views[t].shape[1] + kFp8Block - 1) / kFp8Block};
  };
  std::vector<std::unique_ptr<uint8_t[]>> codes(projections.size()), scales(projections.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < projections.size(); i = next++) {
      const TensorView& view = views[projections[i]];
      const std::vector<int64_t> shape = scale_shape(projections[i]);
      codes[i].reset(new uint8_t[static_cast<size_t>(view.numel())]);
      scales[i].reset(new uint8_t[static_cast<size_t>(shape[0] * shape[1]) * sizeof(float)]);
      quantize_fp8_blocks(static_cast<const float*>(view.data), view.shape[0], view.shape[1], kFp8Block, kFp8Block,
                          codes[i].get(), reinterpret_cast<float*>(scales[i].get()));
    }
  };
  std::vector<std::thread> threads;
  for (unsigned i = 0; i < std::max(1u, std::thread::hardware_concurrency()); ++i) threads.emplace_back(worker);
  for (std::thread& thread : threads) thread.join();
  for (size_t i = 0; i < projections.size(); ++i) {
    TensorView& view = views[projections[i]];
    buffers[projections[i]] = std::move(codes[i]);
    view.dtype = DType::kF8E4M3;
    view.data = buffers[projections[i]].get();
    view.size_bytes = static_cast<size_t>(view.numel());
    TensorView scale_view;
    scale_view.name = view.name + "_scale_inv";
    scale_view.dtype = DType::kF32;
    scale_view.shape = scale_shape(projections[i]);
    scale_view.size_bytes = static_cast<size_t>(scale_view.numel()) * sizeof(float);
    buffers.push_back(std::move(scales[i]));
    scale_view.data = buffers.back().get();
    views.push_back(std::move(scale_view));
  }
}

const char* torch_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
    case DType::kF8E4M3:
    case DType::kMxfp4:
      return "bfloat16";
    case DType::kF16: return "float16";
    default: return "float32";
  }
}

Result<void> write_config(const ModelConfig& config, DType dtype, const std::string& path) {
  nlohmann::json raw = config.raw;
  raw["torch_dtype"] = torch_dtype_name(dtype);
  if (raw.contains("dtype")) raw["dtype"] = torch_dtype_name(dtype);
  if (dtype == DType::kF8E4M3) {
    raw["quantization_config"] = {{"quant_method", "fp8"},
                                  {"fmt", "e4m3"},
                                  {"activation_scheme", "dynamic"},
                                  {"weight_block_size", {kFp8Block, kFp8Block}}};
  }
  if (dtype == DType::kMxfp4) {
    raw["quantization_config"] = {
        {"quant_method", "mxfp4"},
        {"modules_to_not_convert",
         {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}}};
  }
  std::ofstream out(path, std::ios::trunc);
  out << raw.dump(2) << "\n";
  out.close();
  if (!out) return Error{"cannot write " + path + ": " + std::strerror(errno)};
  return {};
}

Result<void> run(int argc, char** argv) {
  auto flags = parse_tool_flags(argc, argv, {"--config", "--out", "--dtype", "--seed", "--router-skew"});
  if (!flags.ok()) return flags.error();
  if (!flags->count("--config") || !flags->count("--out")) return Error{"--config and --out are required"};
  const std::string out_dir = flags->at("--out");
  auto dtype = parse_dtype(flags->count("--dtype") ? flags->at("--dtype") : "bf16");
  if (!dtype.ok()) return dtype.error();
  uint64_t seed = 0;
  if (flags->count("--seed")) {
    const std::string& text = flags->at("--seed");
    char* end = nullptr;
    seed = std::strtoull(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0') return Error{"--seed must be a non-negative integer, got '" + text + "'"};
  }

  std::optional<double> router_skew;
  if (flags->count("--router-skew")) {
    const std::string& text = flags->at("--router-skew");
    char* end = nullptr;
    router_skew = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0') return Error{"--router-skew must be a number, got '" + text + "'"};
  }

  const std::string config_path = flags->at("--config");
  auto text = read_text_file(config_path);
  if (!text.ok()) return text.error();
  auto config = ModelConfig::parse(*text, config_path);
  if (!config.ok()) return config.error();
  auto layout = config->moe ? moe_layout(*config) : dense_layout(*config);
  if (!layout.ok()) return Error{config_path + ": " + layout.error().message};
  if (*dtype == DType::kMxfp4) {
    if (auto split = split_mxfp4_experts(layout->tensors); !split.ok())
      return Error{config_path + ": " + split.error().message};
  }

  const auto start = std::chrono::steady_clock::now();
  std::vector<std::unique_ptr<uint8_t[]>> buffers;
  std::vector<TensorView> views;
  uint64_t total_bytes = 0;
  for (const DenseTensor& spec : layout->tensors) {
    TensorView view;
    view.name = spec.hf_name;
    // FP8 projections are drawn in float32, then quantised below; MXFP4 codes and scales are bytes.
    if (*dtype == DType::kMxfp4) {
      view.dtype = spec.hf_name.ends_with("_blocks") || spec.hf_name.ends_with("_scales") ? DType::kU8 : DType::kBF16;
    } else {
      view.dtype = *dtype != DType::kF8E4M3 ? *dtype : is_fp8_projection(spec) ? DType::kF32 : DType::kBF16;
    }
    view.shape = spec.shape;
    view.size_bytes = static_cast<size_t>(view.numel()) * dtype_size_bytes(view.dtype);
    buffers.emplace_back(new uint8_t[view.size_bytes]);
    view.data = buffers.back().get();
    views.push_back(std::move(view));
  }
  fill_all(layout->tensors, views, seed);
  if (router_skew) {
    auto skew = skew_routers(*config, views, *router_skew, seed);
    if (!skew.ok()) return Error{config_path + ": " + skew.error().message};
    std::printf("router skew: %lld layers, bias standard deviations %.4g-%.4g for a busiest tenth's share of %.3f\n",
                static_cast<long long>(skew->num_layers), skew->min_scale, skew->max_scale, *router_skew);
  }
  if (*dtype == DType::kF8E4M3) quantize_projections(views, buffers);
  for (const TensorView& view : views) total_bytes += view.size_bytes;

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return Error{"cannot create directory " + out_dir + ": " + ec.message()};
  DI_TRY(write_config(*config, *dtype, out_dir + "/config.json"));
  DI_TRY(write_safetensors(out_dir + "/model.safetensors", views, {{"format", "pt"}}));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // FP8 and MXFP4 checkpoints keep their other tensors in bf16 (the config's torch_dtype): name both.
  const std::string format = *dtype == DType::kF8E4M3 || *dtype == DType::kMxfp4
                                 ? std::string(dtype_name(*dtype)) + " + " + torch_dtype_name(*dtype)
                                 : torch_dtype_name(*dtype);
  std::printf("wrote %s: %zu tensors, %.2f GB %s, in %.1f s\n", out_dir.c_str(), views.size(), total_bytes * 1e-9,
              format.c_str(), seconds);
  return {};
}

}  // namespace
}  // namespace deepinfer::bench

int main(int argc, char** argv) {
  return deepinfer::bench::tool_main(argc, argv, "deepinfer-make-random-model", deepinfer::bench::kUsage, &deepinfer::bench::run);
}
