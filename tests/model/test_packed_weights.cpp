// Block-quantised checkpoints loaded packed on the CPU backend (Backend::reads_packed_weights)
// against the same checkpoints dequantised at load (BackendOptions::packed_weights = false): the
// FP8 fixture's logits, an MXFP4 GPT-OSS expert layer's output, and the bytes each way holds.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <filesystem>
#include <random>

#include "engine/generator.h"
#include "fixtures.h"
#include "model/layers/linear.h"
#include "model/layers/moe.h"
#include "model/model.h"

namespace deepinfer {
namespace {

std::unique_ptr<Backend> cpu_backend(bool packed_weights) {
  BackendOptions options;
  options.packed_weights = packed_weights;
  return make_backend("cpu", options).value();
}

ModelSource fixture_source(const std::string& name, Backend& backend) {
  const std::string dir = testing::fixture_dir(name);
  ModelSource source;
  source.config = ModelConfig::load(dir).value();
  source.weights = std::make_shared<const WeightStore>(WeightStore::open_dir(dir, false).value());
  source.backend = &backend;
  source.arena = std::make_shared<WeightArena>();
  return source;
}

std::vector<float> prompt_logits(Backend& backend, const std::vector<int32_t>& tokens) {
  auto model = load_model(testing::fixture_dir("deepseek_v3_fp8"), backend, false);
  EXPECT_TRUE(model.ok()) << model.error().message;
  Generator generator(**model, 8, static_cast<int64_t>(tokens.size()) + 1);
  std::vector<float> logits = generator.append(tokens, true).value();
  const std::vector<float> decode = generator.append({tokens.front()}, true).value();
  logits.insert(logits.end(), decode.begin(), decode.end());
  return logits;
}

// The FP8 GEMV multiplies e4m3 * scale, rounded once to float32, in the F32 GEMV's order, and both
// loadings switch to the GEMM past the same row count: the same logits, bit for bit.
TEST(PackedWeights, Fp8FixtureLogitsEqualTheDequantisedLoad) {
  const auto tokens = testing::load_expected("deepseek_v3_fp8")["score"]["tokens"].get<std::vector<int32_t>>();
  ASSERT_LE(tokens.size(), 32u) << "a longer prompt takes oneDNN, where only a tolerance holds";
  auto packed = cpu_backend(true);
  auto dequantised = cpu_backend(false);
  const std::vector<float> a = prompt_logits(*packed, tokens);
  const std::vector<float> b = prompt_logits(*dequantised, tokens);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "logit " << i;
}

// Bytes of the FP8 fixture's projections as held, against bf16 (2 bytes a value): e4m3 is one byte,
// plus a float32 scale per block (the fixture's 16 x 16 blocks add 4 / 256 of a byte a value;
// DeepSeek-V3's 128 x 128 ones 4 / 16384).
TEST(PackedWeights, Fp8ProjectionsHoldHalfOfBf16) {
  auto packed = cpu_backend(true);
  auto dequantised = cpu_backend(false);
  const ModelSource packed_source = fixture_source("deepseek_v3_fp8", *packed);
  const ModelSource dequantised_source = fixture_source("deepseek_v3_fp8", *dequantised);
  const ModelConfig& config = packed_source.config;
  const int64_t hidden = config.hidden_size;
  const std::string o_proj = "model.layers.0.self_attn.o_proj";
  const int64_t o_in = config.num_attention_heads * config.raw["v_head_dim"].get<int64_t>();
  const Linear linear = Linear::load(packed_source, o_proj, hidden, o_in, false).value();
  ASSERT_EQ(linear.weight.dtype, DType::kF8E4M3);
  const int64_t bf16_bytes = 2 * hidden * o_in;
  EXPECT_LE(linear.weight_bytes(), bf16_bytes * 0.51) << linear.weight_bytes() << " of " << bf16_bytes;
  const Linear dequantised_linear = Linear::load(dequantised_source, o_proj, hidden, o_in, false).value();
  EXPECT_EQ(dequantised_linear.weight.dtype, DType::kF32);

  const MoeOptions options = moe_options_from_config(*config.moe);
  const MoeLayer moe = MoeLayer::load(packed_source, "model.layers.1.mlp", hidden, options).value();
  const int64_t expert_bf16_bytes = 2 * 3 * hidden * options.intermediate_size;
  EXPECT_LE(moe.expert_bytes(), expert_bf16_bytes * 0.53) << moe.expert_bytes() << " of " << expert_bf16_bytes;
  EXPECT_GE(moe.expert_bytes(), expert_bf16_bytes * 0.5);
}

// A GPT-OSS MoE layer with MXFP4 experts and float32 biases, written here (the whole-model check is the
// gpt_oss_mxfp4 fixture's).
class Mxfp4Checkpoint {
 public:
  static constexpr int64_t kHidden = 64, kInter = 32, kExperts = 4;

  Mxfp4Checkpoint() {
    std::mt19937 rng(5);
    const std::string p = "model.layers.0.mlp.";
    add_f32(p + "gate.weight", {kExperts, kHidden}, rng);
    add_mxfp4(p + "experts.gate_up_proj", 2 * kInter, kHidden, rng);
    add_f32(p + "experts.gate_up_proj_bias", {kExperts, 2 * kInter}, rng);
    add_mxfp4(p + "experts.down_proj", kHidden, kInter, rng);
    add_f32(p + "experts.down_proj_bias", {kExperts, kHidden}, rng);
  }

  ModelSource source(Backend& backend) const {
    const std::string path =
        (std::filesystem::temp_directory_path() / ("packed_weights_" + std::to_string(::getpid()) + ".safetensors"))
            .string();
    EXPECT_TRUE(write_safetensors(path, views_).ok());
    ModelSource source;
    // Only the routing options below matter to the layer; the config is a well-formed MoE one.
    source.config = ModelConfig::parse(R"({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "vocab_size": 11, "hidden_size": 64, "intermediate_size": 7, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32})",
                                       "config.json")
                        .value();
    source.weights = std::make_shared<const WeightStore>(WeightStore::open_file(path).value());
    std::filesystem::remove(path);  // the mapping keeps the data
    source.backend = &backend;
    source.arena = std::make_shared<WeightArena>();
    return source;
  }

  static MoeOptions options() {
    MoeOptions options;
    options.routing.num_experts = kExperts;
    options.routing.top_k = 2;
    options.intermediate_size = kInter;
    options.layout = ExpertLayout::kGptOss;
    options.activation = kernels::ExpertActivation::kClampedSwiglu;
    return options;
  }

 private:
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
    TensorView view;
    view.name = name;
    view.dtype = dtype;
    view.shape = std::move(shape);
    view.size_bytes = bytes.size();
    view.data = buffers_.emplace_back(std::move(bytes)).data();
    views_.push_back(view);
  }
  void add_f32(const std::string& name, std::vector<int64_t> shape, std::mt19937& rng) {
    std::normal_distribution<float> dist(0.0f, 0.5f);
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    std::vector<uint8_t> bytes(static_cast<size_t>(count) * sizeof(float));
    for (int64_t i = 0; i < count; ++i) {
      const float value = dist(rng);
      std::memcpy(bytes.data() + i * sizeof(float), &value, sizeof(float));
    }
    add(name, DType::kF32, std::move(shape), std::move(bytes));
  }
  // `name`_blocks [E, rows, cols / 32, 16] of random codes, `name`_scales near 2^-3.
  void add_mxfp4(const std::string& name, int64_t rows, int64_t cols, std::mt19937& rng) {
    std::vector<uint8_t> blocks(static_cast<size_t>(kExperts * rows * cols / 2));
    for (uint8_t& pair : blocks) pair = static_cast<uint8_t>(rng());
    std::vector<uint8_t> scales(static_cast<size_t>(kExperts * rows * cols / 32));
    for (uint8_t& scale : scales) scale = static_cast<uint8_t>(122 + rng() % 4);
    add(name + "_blocks", DType::kU8, {kExperts, rows, cols / 32, 16}, std::move(blocks));
    add(name + "_scales", DType::kU8, {kExperts, rows, cols / 32}, std::move(scales));
  }

  std::deque<std::vector<uint8_t>> buffers_;
  std::vector<TensorView> views_;
};

std::vector<float> run_layer(const MoeLayer& layer, Backend& backend, const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size()) / Mxfp4Checkpoint::kHidden;
  std::vector<float> scratch(static_cast<size_t>(layer.scratch_floats(n)));
  std::vector<float> out(x.size());
  layer.forward(backend, x.data(), n, scratch.data(), out.data());
  return out;
}

// Packed MXFP4 experts give the bf16-dequantised experts' output bit for bit (exact values, the same
// GEMV order) for decode-sized steps, and hold about a quarter of their bytes.
TEST(PackedWeights, Mxfp4ExpertsEqualTheDequantisedLoadAtAQuarterOfTheBytes) {
  const Mxfp4Checkpoint checkpoint;
  auto packed = cpu_backend(true);
  auto dequantised = cpu_backend(false);
  const ModelSource packed_source = checkpoint.source(*packed);
  const ModelSource dequantised_source = checkpoint.source(*dequantised);
  const int64_t hidden = Mxfp4Checkpoint::kHidden;
  const MoeLayer a = MoeLayer::load(packed_source, "model.layers.0.mlp", hidden, Mxfp4Checkpoint::options()).value();
  const MoeLayer b =
      MoeLayer::load(dequantised_source, "model.layers.0.mlp", hidden, Mxfp4Checkpoint::options()).value();
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(5 * hidden));
  for (float& v : x) v = dist(rng);
  const std::vector<float> want = run_layer(b, *dequantised, x);
  const std::vector<float> got = run_layer(a, *packed, x);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "output " << i;
  // Dequantised with float32 biases: 4 bytes a value; MXFP4: half a byte plus a one-byte scale per 32.
  // The biases are float32 both ways.
  const int64_t bias_bytes = 4 * (2 * Mxfp4Checkpoint::kInter + hidden);
  const double ratio =
      static_cast<double>(a.expert_bytes() - bias_bytes) / static_cast<double>(b.expert_bytes() - bias_bytes);
  EXPECT_NEAR(ratio, (0.5 + 1.0 / 32) / 4, 1e-9);
}

}  // namespace
}  // namespace deepinfer
