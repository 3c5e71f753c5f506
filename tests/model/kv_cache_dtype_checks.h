// The fp8 KV cache checks every backend runs (tests/model/test_kv_cache_dtype.cpp on the CPU,
// tests/cuda/test_cuda_kv_fp8.cpp on the GPU), each over backends a KvBackendMaker makes: the
// fixtures with an fp8 cache against transformers' top logprobs, and the checkpoint's k/v scales from
// the file through the cache write into the first layer's cached values (each value the e4m3 code
// core/dtype gives value / scale, times the scale), for GQA and MLA caches.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/generator.h"
#include "fixtures.h"
#include "model/model.h"
#include "sampling/logprobs.h"
#include "weights/safetensors.h"

namespace deepinfer::testing {

// A backend with this KV cache dtype (nullopt: the backend's default) in or out of the
// batch-invariant mode.
using KvBackendMaker =
    std::function<std::unique_ptr<Backend>(std::optional<DType> kv_cache_dtype, bool batch_invariant)>;

// Random tiny GQA models (sliding windows, sinks, qk-norm, MoE among them) with an fp8 cache
// against transformers' float32 top logprobs: the top-1 agrees wherever transformers' own top two
// are more than 0.05 nats apart, and no logprob of its top ids moves by more than 0.4 (measured on
// the CPU: 0.03-0.1, Mixtral's 0.28).
inline void expect_fp8_fixtures_keep_top_tokens(const KvBackendMaker& make_backend_with, const std::string& what) {
  for (const char* name : {"llama", "qwen3", "mistral_swa", "gemma3", "gpt_oss", "qwen3_moe", "mixtral"}) {
    const nlohmann::json expected = load_expected(name);
    const std::unique_ptr<Backend> backend = make_backend_with(DType::kF8E4M3, false);
    auto model = load_model(fixture_dir(name), *backend, false);
    ASSERT_TRUE(model.ok()) << model.error().message;
    const auto tokens = expected["score"]["tokens"].get<std::vector<int32_t>>();
    Generator generator(**model, 16, static_cast<int64_t>(tokens.size()));
    auto logits = generator.append(tokens, true);
    ASSERT_TRUE(logits.ok()) << logits.error().message;
    const int64_t vocab = (*model)->config().vocab_size;
    const auto& positions = expected["score"]["positions"];
    double worst = 0.0;
    for (size_t pos = 0; pos < positions.size(); ++pos) {
      const std::vector<double> got = log_softmax(logits->data() + pos * static_cast<size_t>(vocab), vocab);
      const auto& top = positions[pos]["top"];
      for (const auto& entry : top) {
        worst = std::max(worst, std::abs(got[entry[0].get<size_t>()] - entry[1].get<double>()));
      }
      const auto got_top1 = static_cast<int32_t>(std::max_element(got.begin(), got.end()) - got.begin());
      if (top[0][1].get<double>() - top[1][1].get<double>() > 0.05) {
        EXPECT_EQ(got_top1, top[0][0].get<int32_t>()) << name << " pos " << pos;
      }
    }
    std::printf("[fp8 KV vs transformers] %s %s: largest logprob change %.3g\n", what.c_str(), name, worst);
    EXPECT_LT(worst, 0.4) << name;
  }
}

// A copy of a fixture directory (one model.safetensors) with extra tensors in it.
class FixtureWithTensors {
 public:
  FixtureWithTensors(const std::string& name, const std::vector<std::pair<std::string, std::vector<float>>>& extra) {
    dir_ = std::filesystem::temp_directory_path() /
           ("kv-scales-" + name + "-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
            std::to_string(reinterpret_cast<uintptr_t>(this)));
    std::filesystem::create_directories(dir_);
    for (const auto& entry : std::filesystem::directory_iterator(fixture_dir(name))) {
      if (entry.path().extension() != ".safetensors")
        std::filesystem::copy(entry.path(), dir_ / entry.path().filename());
    }
    const WeightStore store = WeightStore::open_dir(fixture_dir(name), false).value();
    std::vector<TensorView> tensors;
    for (const std::string& tensor_name : store.names()) tensors.push_back(*store.find(tensor_name));
    for (const auto& [tensor_name, values] : extra) {
      TensorView view;
      view.name = tensor_name;
      view.dtype = DType::kF32;
      view.shape =
          values.size() == 1 ? std::vector<int64_t>{} : std::vector<int64_t>{static_cast<int64_t>(values.size())};
      view.data = values.data();
      view.size_bytes = values.size() * sizeof(float);
      tensors.push_back(view);
    }
    EXPECT_TRUE(write_safetensors((dir_ / "model.safetensors").string(), tensors).ok());
  }
  ~FixtureWithTensors() { std::filesystem::remove_all(dir_); }
  std::string path() const { return dir_.string(); }

 private:
  std::filesystem::path dir_;
};

// Runs the fixture's scored tokens and returns every cached K/V value (read_kv_blocks: float32,
// fp8 codes times their scales).
inline std::vector<float> cached_values(CausalLM& model, const std::vector<int32_t>& tokens) {
  constexpr int32_t kBlock = 16;
  const auto n = static_cast<int32_t>(tokens.size());
  const int32_t num_blocks = (n + kBlock - 1) / kBlock;
  model.allocate_kv_cache(KvCacheShape{num_blocks, kBlock, 0});
  std::vector<float> logits(static_cast<size_t>(n) * static_cast<size_t>(model.config().vocab_size));
  model.forward(contiguous_sequence_batch(tokens, 0, num_blocks), logits.data());
  std::vector<int32_t> blocks(static_cast<size_t>(num_blocks));
  for (int32_t b = 0; b < num_blocks; ++b) blocks[static_cast<size_t>(b)] = b;
  std::vector<float> values(static_cast<size_t>(num_blocks * model.kv_floats_per_block()));
  model.read_kv_blocks(blocks, values.data());
  return values;
}

// A fixture's scored tokens through its float32 model (batch-invariant kernels, as the fp8 runs
// they are compared with): the cached values.
struct Float32Run {
  Float32Run(const KvBackendMaker& make_backend_with, const std::string& name)
      : tokens(load_expected(name)["score"]["tokens"].get<std::vector<int32_t>>()),
        backend(make_backend_with(std::nullopt, true)),
        model(load_model(fixture_dir(name), *backend, false).value()),
        values(cached_values(*model, tokens)) {}
  std::vector<int32_t> tokens;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<CausalLM> model;
  std::vector<float> values;
};

// The same tokens through an fp8 copy of the fixture with these checkpoint scales (batch-invariant
// kernels): its cached values.
inline std::vector<float> fp8_values(const KvBackendMaker& make_backend_with, const std::string& name,
                                     const std::vector<std::pair<std::string, std::vector<float>>>& scales,
                                     const std::vector<int32_t>& tokens) {
  FixtureWithTensors fixture(name, scales);
  const std::unique_ptr<Backend> fp8 = make_backend_with(DType::kF8E4M3, true);
  const std::unique_ptr<CausalLM> model = load_model(fixture.path(), *fp8, false).value();
  return cached_values(*model, tokens);
}

// The checkpoint's scales reach the cache: k scales per column (layer 0) or per kv head, one v
// scale per layer. The first layer's K and V do not depend on the cache, so the float32 model caches exactly
// the values the fp8 one codes there: each cached value must be core/dtype's e4m3 code of (that
// value / scale), times the scale; this is the check of the writes' scales (per column for K, per
// tensor for V). Deeper layers see fp8 attention before them, so nothing independent predicts their
// values: read back through the same scales, each must still be a code times its column's scale,
// which checks only the read path.
inline void expect_checkpoint_scales_code_every_value(const KvBackendMaker& make_backend_with) {
  const Float32Run reference(make_backend_with, "llama");
  const ModelConfig& config = reference.model->config();
  const auto kv_heads = static_cast<size_t>(config.num_key_value_heads);
  const auto head_dim = static_cast<size_t>(config.head_dim);
  std::vector<std::pair<std::string, std::vector<float>>> scales;
  for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
    // Layer 0: one k scale per column; the others one per kv head.
    std::vector<float> k(layer == 0 ? kv_heads * head_dim : kv_heads);
    for (size_t h = 0; h < k.size(); ++h)
      k[h] = std::ldexp(0.75f, -static_cast<int>(3 + h % 5 + static_cast<size_t>(layer)));
    const std::string prefix = "model.layers." + std::to_string(layer) + ".self_attn.";
    scales.emplace_back(prefix + "k_scale", k);
    scales.emplace_back(prefix + "v_scale", std::vector<float>{0.003f * static_cast<float>(layer + 1)});  // one
  }
  const std::vector<float>& want = reference.values;
  const std::vector<float> got = fp8_values(make_backend_with, "llama", scales, reference.tokens);
  ASSERT_EQ(got.size(), want.size());
  // read_kv_blocks: per block, per layer, block_size K rows then block_size V rows of kv_dim.
  const size_t kv_dim = kv_heads * head_dim;
  const size_t block_rows = 16;
  const size_t layer_floats = 2 * block_rows * kv_dim;
  size_t first_layer_values = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const size_t layer = (i / layer_floats) % static_cast<size_t>(config.num_hidden_layers);
    const size_t in_layer = i % layer_floats;
    const bool is_v = in_layer >= block_rows * kv_dim;
    const size_t column = in_layer % kv_dim;
    const auto& layer_scales = scales[2 * layer + (is_v ? 1 : 0)].second;
    const float scale = is_v                            ? layer_scales[0]
                        : layer_scales.size() == kv_dim ? layer_scales[column]
                                                        : layer_scales[column / head_dim];
    const float source = layer == 0 ? want[i] : got[i];
    ASSERT_EQ(got[i], f8e4m3_to_f32(f32_to_f8e4m3(source / scale)) * scale)
        << "value " << i << " of layer " << layer << " (" << source << ") scale " << scale;
    if (layer == 0) ++first_layer_values;
  }
  EXPECT_GT(first_layer_values, 0u);
}

// MLA's latent rows are written and read with k_scale (v_scale, here another value, is not read):
// the first layer's latent values, the float32 model's exactly, are cached as e4m3(value / 0.375)
// times 0.375; every other cached value is a code times 0.375. k_scale alone loads too.
inline void expect_mla_latent_rows_take_k_scale(const KvBackendMaker& make_backend_with) {
  const Float32Run reference(make_backend_with, "deepseek_v3");
  const ModelConfig& config = reference.model->config();
  std::vector<std::pair<std::string, std::vector<float>>> scales;
  for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
    const std::string prefix = "model.layers." + std::to_string(layer) + ".self_attn.";
    scales.emplace_back(prefix + "k_scale", std::vector<float>{0.375f});
    scales.emplace_back(prefix + "v_scale", std::vector<float>{0.1f});
  }
  const std::vector<float>& want = reference.values;
  const std::vector<float> got = fp8_values(make_backend_with, "deepseek_v3", scales, reference.tokens);
  ASSERT_EQ(got.size(), want.size());
  // read_kv_blocks: per block, per layer, 16 latent rows.
  const auto layer_floats = static_cast<size_t>(reference.model->kv_floats_per_block() / config.num_hidden_layers);
  size_t first_layer_values = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool first_layer = (i / layer_floats) % static_cast<size_t>(config.num_hidden_layers) == 0;
    const float source = first_layer ? want[i] : got[i];
    ASSERT_EQ(got[i], f8e4m3_to_f32(f32_to_f8e4m3(source / 0.375f)) * 0.375f) << "value " << i << " (" << source << ")";
    if (first_layer && want[i] != 0.0f) ++first_layer_values;
  }
  EXPECT_GT(first_layer_values, 0u);
  FixtureWithTensors k_only("deepseek_v3", {{"model.layers.0.self_attn.k_scale", {0.375f}}});
  const std::unique_ptr<Backend> fp8 = make_backend_with(DType::kF8E4M3, false);
  EXPECT_TRUE(load_model(k_only.path(), *fp8, false).ok());
}

}  // namespace deepinfer::testing
