// The KV cache's size on CUDA (engine/memory_plan.h): once the engine has started and the cache has
// taken what the dry run left, the heaviest step the limits allow still runs. A 151936-token
// vocabulary makes one 32768-token chunk's prompt-logprob logits ~20 GB on the device: more than
// the old rule (the cache takes 90% of the memory free after the weights) left, so that step ran
// out of memory after start-up.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "core/dtype.h"
#include "cuda_test_util.h"
#include "engine/engine_core.h"
#include "model/model.h"
#include "weights/safetensors.h"

namespace deepinfer::testing {
namespace {

constexpr int64_t kVocab = 151936;
constexpr int64_t kHidden = 512;
constexpr int64_t kIntermediate = 1024;
constexpr int64_t kLayers = 4;
constexpr int64_t kHeads = 8;
constexpr int64_t kHeadDim = 64;

// A Llama-shaped bf16 checkpoint with that vocabulary and 8 KB of KV per token, random weights.
std::string write_large_vocabulary_model() {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "deepinfer_memory_plan_model";
  fs::create_directories(dir);
  std::ofstream(dir / "config.json")
      << R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": )" << kVocab
      << R"(, "hidden_size": )" << kHidden << R"(, "intermediate_size": )" << kIntermediate
      << R"(, "num_hidden_layers": )" << kLayers << R"(, "num_attention_heads": )" << kHeads
      << R"(, "num_key_value_heads": )" << kHeads << R"(, "head_dim": )" << kHeadDim
      << R"(, "rms_norm_eps": 1e-05, "max_position_embeddings": 262144, "rope_theta": 10000.0,
          "tie_word_embeddings": false, "torch_dtype": "bfloat16"})";
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {{"model.embed_tokens.weight", {kVocab, kHidden}},
                                                                      {"model.norm.weight", {kHidden}},
                                                                      {"lm_head.weight", {kVocab, kHidden}}};
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
      shapes.push_back({p + "self_attn." + proj + ".weight", {kHeads * kHeadDim, kHidden}});
    }
    shapes.push_back({p + "mlp.gate_proj.weight", {kIntermediate, kHidden}});
    shapes.push_back({p + "mlp.up_proj.weight", {kIntermediate, kHidden}});
    shapes.push_back({p + "mlp.down_proj.weight", {kHidden, kIntermediate}});
    shapes.push_back({p + "input_layernorm.weight", {kHidden}});
    shapes.push_back({p + "post_attention_layernorm.weight", {kHidden}});
  }
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-0.05f, 0.05f);
  std::vector<std::vector<uint16_t>> data;
  std::vector<TensorView> tensors;
  for (const auto& [name, shape] : shapes) {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    std::vector<uint16_t>& values = data.emplace_back(static_cast<size_t>(count));
    const bool norm = shape.size() == 1;
    for (uint16_t& v : values) v = f32_to_bf16(norm ? 1.0f : dist(rng));
    TensorView t;
    t.name = name;
    t.dtype = DType::kBF16;
    t.shape = shape;
    t.data = values.data();
    t.size_bytes = values.size() * sizeof(uint16_t);
    tensors.push_back(t);
  }
  const auto written = write_safetensors((dir / "model.safetensors").string(), tensors);
  if (!written.ok()) throw std::runtime_error(written.error().message);
  return dir.string();
}

TEST(CudaMemoryPlan, HeaviestStepRunsAfterTheCacheTookTheRest) {
  auto backend = cuda_backend();
  auto model = load_model(write_large_vocabulary_model(), *backend, false);
  ASSERT_TRUE(model.ok()) << model.error().message;
  EngineConfig config;
  config.scheduler.max_num_seqs = 256;
  config.scheduler.max_num_batched_tokens = 32768;
  config.max_model_len = 262144;  // 256 such sequences would want 512 GB of KV: the cache takes its whole budget
  config.gpu_memory_utilization = 0.95;
  EngineCore engine(**model, nullptr, config);
  const DeviceMemory after_start = *backend->device_memory();
  EXPECT_LT(static_cast<double>(after_start.free_bytes), 0.1 * static_cast<double>(after_start.total_bytes))
      << "the KV cache should have taken the memory the dry run left";

  std::mt19937 rng(9);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(kVocab) - 1);
  const auto prompt = [&](int32_t length) {
    std::vector<int32_t> ids(static_cast<size_t>(length));
    for (int32_t& id : ids) id = token(rng);
    return ids;
  };
  SamplingParams scored;
  scored.max_tokens = 2;
  scored.temperature = 0.0;
  scored.prompt_logprobs = 1;
  ASSERT_TRUE(engine.add_request(0, prompt(32768), scored).ok());
  SamplingParams decoded;
  decoded.max_tokens = 8;
  decoded.temperature = 0.8;
  decoded.top_p = 0.95;
  decoded.ignore_eos = true;
  for (int64_t id = 1; id < 256; ++id) ASSERT_TRUE(engine.add_request(id, prompt(100), decoded).ok());

  size_t scored_positions = 0;
  int64_t finished = 0;
  for (int step = 0; step < 1000 && engine.has_unfinished_requests(); ++step) {
    for (const RequestOutput& out : engine.step()) {
      if (out.prompt_logprobs) scored_positions = out.prompt_logprobs->size();
      if (out.finished) ++finished;
    }
  }
  EXPECT_EQ(finished, 256);
  EXPECT_EQ(scored_positions, 32768u);
}

}  // namespace
}  // namespace deepinfer::testing
