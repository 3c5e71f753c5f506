// The MoE and MLA layers on tiny random checkpoints written here: MLA's weight-absorbed attention
// over the latent cache against a plain expanded-K/V computation (prefill, then decode steps over
// the cache, with and without q_lora); the MoE layer's three weight layouts against each other;
// FP8 e4m3 decoding and block dequantisation against hand-computed values; the shared experts
// enqueued as the backend's side work beside the routed ones; the layer switching
// to a new expert placement between forwards under expert parallelism (EPLB), its exchange planned
// on the host or in fixed-size blocks by the backend (whose transfers wait for the forward's end),
// with the same bits as one device.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "group_threads.h"
#include "model/expert_parallel.h"
#include "model/layers/attention.h"
#include "model/layers/mla.h"
#include "model/layers/mlp.h"
#include "model/layers/moe.h"
#include "runtime/forwarding_backend.h"
#include "weights/fp8.h"

namespace deepinfer {
namespace {

constexpr int64_t kHidden = 24;

// A checkpoint built in memory: float32 tensors written to a temporary safetensors file.
class TinyCheckpoint {
 public:
  explicit TinyCheckpoint(uint32_t seed) : rng_(seed) {}
  const std::vector<float>& add(const std::string& name, std::vector<int64_t> shape, float scale = 0.2f,
                                float offset = 0.0f) {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> values(static_cast<size_t>(count));
    for (float& v : values) v = offset + scale * dist(rng_);
    shapes_[name] = std::move(shape);
    return values_[name] = std::move(values);
  }
  void put(const std::string& name, std::vector<int64_t> shape, std::vector<float> values) {
    shapes_[name] = std::move(shape);
    values_[name] = std::move(values);
  }
  const std::vector<float>& at(const std::string& name) const { return values_.at(name); }

  // Writes the file (every tensor as dtype: F32, or BF16 rounded to nearest even) and returns a
  // ModelSource over it on backend.
  ModelSource source(const std::string& config_json, Backend& backend, DType dtype = DType::kF32) {
    const std::string path =
        (std::filesystem::temp_directory_path() / ("moe_layers_" + std::to_string(::getpid()) + "_" +
                                                   std::to_string(counter_++) + ".safetensors"))
            .string();
    std::vector<TensorView> views;
    std::vector<std::vector<uint16_t>> rounded;
    for (const auto& [name, values] : values_) {
      TensorView view;
      view.name = name;
      view.dtype = dtype;
      view.shape = shapes_.at(name);
      view.data = values.data();
      view.size_bytes = values.size() * sizeof(float);
      if (dtype == DType::kBF16) {
        std::vector<uint16_t>& bits = rounded.emplace_back(values.size());
        std::transform(values.begin(), values.end(), bits.begin(), f32_to_bf16);
        view.data = bits.data();
        view.size_bytes = bits.size() * sizeof(uint16_t);
      }
      views.push_back(view);
    }
    EXPECT_TRUE(write_safetensors(path, views).ok());
    ModelSource source;
    source.config = ModelConfig::parse(config_json, "config.json").value();
    source.weights = std::make_shared<const WeightStore>(WeightStore::open_file(path).value());
    std::filesystem::remove(path);  // the mapping keeps the data
    source.backend = &backend;
    source.arena = std::make_shared<WeightArena>();
    return source;
  }

 private:
  std::mt19937 rng_;
  std::map<std::string, std::vector<int64_t>> shapes_;
  std::map<std::string, std::vector<float>> values_;
  static inline int counter_ = 0;
};

std::vector<double> matvec(const std::vector<float>& w, int64_t rows, int64_t cols, const double* x,
                           int64_t row_begin = 0) {
  std::vector<double> y(static_cast<size_t>(rows), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) y[r] += static_cast<double>(w[(row_begin + r) * cols + c]) * x[c];
  }
  return y;
}

std::vector<double> rms_norm(std::vector<double> x, const std::vector<float>& weight, double eps) {
  double ss = 0.0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  for (size_t i = 0; i < x.size(); ++i) x[i] = x[i] * inv * weight[i];
  return x;
}

// Interleaved rope on pairs (2i, 2i + 1) at position pos.
void rope_interleaved(double* x, int64_t dim, int32_t pos, const RopeTable& rope) {
  for (int64_t i = 0; i < dim / 2; ++i) {
    const double angle = static_cast<double>(static_cast<float>(pos) * rope.inv_freq[static_cast<size_t>(i)]);
    const double c = std::cos(angle) * rope.attention_scaling;
    const double s = std::sin(angle) * rope.attention_scaling;
    const double a = x[2 * i];
    const double b = x[2 * i + 1];
    x[2 * i] = a * c - b * s;
    x[2 * i + 1] = b * c + a * s;
  }
}

struct MlaShape {
  int64_t heads = 3, q_lora = 0, lora = 10, nope = 6, rope = 4, v = 5;
};

std::string mla_config(const MlaShape& s) {
  const std::string q_lora = s.q_lora == 0 ? "null" : std::to_string(s.q_lora);
  return R"({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": 11,
             "hidden_size": )" +
         std::to_string(kHidden) + R"(, "intermediate_size": 7, "num_hidden_layers": 1,
             "num_attention_heads": )" +
         std::to_string(s.heads) + R"(, "rms_norm_eps": 1e-6, "max_position_embeddings": 256,
             "q_lora_rank": )" +
         q_lora + R"(, "kv_lora_rank": )" + std::to_string(s.lora) + R"(, "qk_nope_head_dim": )" +
         std::to_string(s.nope) + R"(, "qk_rope_head_dim": )" + std::to_string(s.rope) +
         R"(, "v_head_dim": )" + std::to_string(s.v) + R"(,
             "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                              "mscale": 1.0, "mscale_all_dim": 0.8}, "rope_theta": 10000.0})";
}

// out[t] of the expanded form: per head K = [W_UK c ; k_rope], V = W_UV c, causal softmax attention.
std::vector<double> mla_expanded(const TinyCheckpoint& ckpt, const MlaShape& s, const MlaOptions& options,
                                 const RopeTable& rope, const std::vector<float>& x, int64_t num_tokens) {
  const std::string p = "model.layers.0.self_attn.";
  const int64_t qd = s.nope + s.rope;
  std::vector<std::vector<double>> q(num_tokens), k(num_tokens), v(num_tokens);
  for (int64_t t = 0; t < num_tokens; ++t) {
    std::vector<double> xt(x.begin() + t * kHidden, x.begin() + (t + 1) * kHidden);
    std::vector<double> qt;
    if (s.q_lora == 0) {
      qt = matvec(ckpt.at(p + "q_proj.weight"), s.heads * qd, kHidden, xt.data());
    } else {
      auto qa = rms_norm(matvec(ckpt.at(p + "q_a_proj.weight"), s.q_lora, kHidden, xt.data()),
                         ckpt.at(p + "q_a_layernorm.weight"), 1e-6);
      qt = matvec(ckpt.at(p + "q_b_proj.weight"), s.heads * qd, s.q_lora, qa.data());
    }
    auto kv = matvec(ckpt.at(p + "kv_a_proj_with_mqa.weight"), s.lora + s.rope, kHidden, xt.data());
    std::vector<double> latent(kv.begin(), kv.begin() + s.lora);
    latent = rms_norm(latent, ckpt.at(p + "kv_a_layernorm.weight"), 1e-6);
    std::vector<double> k_rope(kv.begin() + s.lora, kv.end());
    rope_interleaved(k_rope.data(), s.rope, static_cast<int32_t>(t), rope);
    const auto kv_b = matvec(ckpt.at(p + "kv_b_proj.weight"), s.heads * (s.nope + s.v), s.lora, latent.data());
    for (int64_t h = 0; h < s.heads; ++h) {
      rope_interleaved(qt.data() + h * qd + s.nope, s.rope, static_cast<int32_t>(t), rope);
      for (int64_t i = 0; i < s.nope; ++i) k[t].push_back(kv_b[h * (s.nope + s.v) + i]);
      for (int64_t i = 0; i < s.rope; ++i) k[t].push_back(k_rope[i]);
      for (int64_t i = 0; i < s.v; ++i) v[t].push_back(kv_b[h * (s.nope + s.v) + s.nope + i]);
    }
    q[t] = qt;
  }
  std::vector<double> out;
  for (int64_t t = 0; t < num_tokens; ++t) {
    std::vector<double> attn(static_cast<size_t>(s.heads * s.v), 0.0);
    for (int64_t h = 0; h < s.heads; ++h) {
      std::vector<double> scores;
      double max_score = -1e300;
      for (int64_t j = 0; j <= t; ++j) {
        double dot = 0.0;
        for (int64_t i = 0; i < qd; ++i) dot += q[t][h * qd + i] * k[j][h * qd + i];
        scores.push_back(dot * options.softmax_scale);
        max_score = std::max(max_score, scores.back());
      }
      double sum = 0.0;
      for (double& sc : scores) sum += sc = std::exp(sc - max_score);
      for (int64_t j = 0; j <= t; ++j) {
        for (int64_t i = 0; i < s.v; ++i) attn[h * s.v + i] += scores[j] / sum * v[j][h * s.v + i];
      }
    }
    const auto o = matvec(ckpt.at(p + "o_proj.weight"), kHidden, s.heads * s.v, attn.data());
    out.insert(out.end(), o.begin(), o.end());
  }
  return out;
}

void check_mla(const MlaShape& s, const std::string& device) {
  TinyCheckpoint ckpt(17);
  const std::string p = "model.layers.0.self_attn.";
  const int64_t qd = s.nope + s.rope;
  if (s.q_lora == 0) {
    ckpt.add(p + "q_proj.weight", {s.heads * qd, kHidden});
  } else {
    ckpt.add(p + "q_a_proj.weight", {s.q_lora, kHidden});
    ckpt.add(p + "q_a_layernorm.weight", {s.q_lora}, 0.2f, 1.0f);
    ckpt.add(p + "q_b_proj.weight", {s.heads * qd, s.q_lora});
  }
  ckpt.add(p + "kv_a_proj_with_mqa.weight", {s.lora + s.rope, kHidden});
  ckpt.add(p + "kv_a_layernorm.weight", {s.lora}, 0.2f, 1.0f);
  ckpt.add(p + "kv_b_proj.weight", {s.heads * (s.nope + s.v), s.lora});
  ckpt.add(p + "o_proj.weight", {kHidden, s.heads * s.v});
  auto backend = make_backend(device).value();
  const ModelSource source = ckpt.source(mla_config(s), *backend);
  const MlaOptions options = mla_options_from_config(source.config).value();
  // yarn factor 4 with mscale_all_dim 0.8: the scale carries the correction squared.
  const double mscale = 0.1 * 0.8 * std::log(4.0) + 1.0;
  EXPECT_NEAR(options.softmax_scale, mscale * mscale / std::sqrt(static_cast<double>(qd)), 1e-6);
  const RopeTable rope = make_rope_table(source.config.rope, s.rope, 256).value();
  EXPECT_NE(rope.attention_scaling, 1.0f);  // mscale 1.0 / mscale_all_dim 0.8
  MlaLayer layer = MlaLayer::load(source, "model.layers.0.self_attn", options, rope).value();
  const int32_t block_size = 4;
  layer.allocate_kv_cache(*backend, KvCacheShape{8, block_size});
  EXPECT_EQ(layer.kv_floats_per_block(), block_size * (s.lora + s.rope));

  const int64_t total = 9;
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(total * kHidden));
  for (float& value : x) value = dist(rng);
  const std::vector<double> want = mla_expanded(ckpt, s, options, rope, x, total);

  // Blocks 5, 2, 7 in that order: positions 0-3, 4-7, 8.
  const std::vector<int32_t> blocks = {5, 2, 7};
  std::vector<float> got(static_cast<size_t>(total * kHidden));
  const auto run = [&](int64_t begin, int64_t end) {
    ForwardBatch batch;
    for (int64_t t = begin; t < end; ++t) {
      batch.token_ids.push_back(0);
      batch.positions.push_back(static_cast<int32_t>(t));
      batch.slot_mapping.push_back(blocks[t / block_size] * block_size + static_cast<int32_t>(t % block_size));
    }
    batch.query_start = {0, static_cast<int32_t>(end - begin)};
    batch.seq_len = {static_cast<int32_t>(end)};
    batch.block_table = blocks;
    batch.max_blocks_per_seq = 3;
    const DeviceBatch device = DeviceBatch::upload(*backend, batch, block_size);
    const int64_t n = end - begin;
    std::vector<float> scratch(static_cast<size_t>(layer.scratch_floats(n)));
    layer.forward(*backend, device, x.data() + begin * kHidden, scratch.data(), got.data() + begin * kHidden);
  };
  run(0, 6);  // prefill
  run(6, 7);  // decode steps over the latent cache
  run(7, 8);
  run(8, 9);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 2e-5 + 2e-5 * std::fabs(want[i])) << device << " element " << i;
  }
}

TEST(MlaLayer, AbsorbedMatchesExpandedWithPlainQ) {
  check_mla(MlaShape{}, "cpu");
  check_mla(MlaShape{}, "ref");
}

TEST(MlaLayer, AbsorbedMatchesExpandedWithLowRankQ) {
  MlaShape shape;
  shape.q_lora = 9;
  shape.heads = 2;
  check_mla(shape, "cpu");
}

std::string moe_config(int64_t experts, int64_t top_k, int64_t inter) {
  return R"({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "vocab_size": 11,
             "hidden_size": )" +
         std::to_string(kHidden) + R"(, "intermediate_size": 7, "num_hidden_layers": 1,
             "num_attention_heads": 2, "num_experts": )" +
         std::to_string(experts) + R"(, "num_experts_per_tok": )" + std::to_string(top_k) +
         R"(, "moe_intermediate_size": )" + std::to_string(inter) + R"(, "norm_topk_prob": true})";
}

std::vector<float> run_moe(const ModelSource& source, const MoeOptions& options, const std::vector<float>& x,
                           std::vector<int64_t>* counts = nullptr) {
  MoeLayer layer = MoeLayer::load(source, "model.layers.0.mlp", kHidden, options).value();
  const int64_t n = static_cast<int64_t>(x.size()) / kHidden;
  std::vector<float> scratch(static_cast<size_t>(layer.scratch_floats(n)));
  std::vector<float> out(x.size());
  layer.forward(*source.backend, x.data(), n, scratch.data(), out.data());
  if (counts != nullptr) *counts = layer.expert_token_counts(*source.backend);
  return out;
}

// One MoE layer's random experts written in the three layouts the loaders read: per-expert tensors,
// transformers 5's fused gate_up/down, and GPT-OSS's transposed, interleaved tensors (zero biases).
struct ThreeLayouts {
  TinyCheckpoint per_expert{3}, fused{3}, gpt_oss{3};
};

ThreeLayouts three_layouts(int64_t experts, int64_t inter) {
  ThreeLayouts layouts;
  TinyCheckpoint& per_expert = layouts.per_expert;
  TinyCheckpoint& fused = layouts.fused;
  TinyCheckpoint& gpt_oss = layouts.gpt_oss;
  const std::string p = "model.layers.0.mlp.";
  const std::vector<float> router = per_expert.add(p + "gate.weight", {experts, kHidden}, 0.5f);
  std::vector<float> gate_up_fused, down_fused;
  std::vector<float> gate_up_oss(static_cast<size_t>(experts * kHidden * 2 * inter));
  std::vector<float> down_oss(static_cast<size_t>(experts * inter * kHidden));
  for (int64_t e = 0; e < experts; ++e) {
    const std::string base = p + "experts." + std::to_string(e) + ".";
    const auto gate = per_expert.add(base + "gate_proj.weight", {inter, kHidden});
    const auto up = per_expert.add(base + "up_proj.weight", {inter, kHidden});
    const auto down = per_expert.add(base + "down_proj.weight", {kHidden, inter});
    gate_up_fused.insert(gate_up_fused.end(), gate.begin(), gate.end());
    gate_up_fused.insert(gate_up_fused.end(), up.begin(), up.end());
    down_fused.insert(down_fused.end(), down.begin(), down.end());
    for (int64_t i = 0; i < inter; ++i) {
      for (int64_t h = 0; h < kHidden; ++h) {
        gate_up_oss[static_cast<size_t>((e * kHidden + h) * 2 * inter + 2 * i)] = gate[i * kHidden + h];
        gate_up_oss[static_cast<size_t>((e * kHidden + h) * 2 * inter + 2 * i + 1)] = up[i * kHidden + h];
      }
    }
    for (int64_t i = 0; i < inter; ++i) {
      for (int64_t h = 0; h < kHidden; ++h) {
        down_oss[static_cast<size_t>((e * inter + i) * kHidden + h)] = down[h * inter + i];
      }
    }
  }
  fused.put(p + "gate.weight", {experts, kHidden}, router);
  fused.put(p + "experts.gate_up_proj", {experts, 2 * inter, kHidden}, gate_up_fused);
  fused.put(p + "experts.down_proj", {experts, kHidden, inter}, down_fused);
  gpt_oss.put(p + "gate.weight", {experts, kHidden}, router);
  gpt_oss.put(p + "experts.gate_up_proj", {experts, kHidden, 2 * inter}, gate_up_oss);
  gpt_oss.put(p + "experts.gate_up_proj_bias", {experts, 2 * inter},
              std::vector<float>(static_cast<size_t>(experts * 2 * inter), 0.0f));
  gpt_oss.put(p + "experts.down_proj", {experts, inter, kHidden}, down_oss);
  gpt_oss.put(p + "experts.down_proj_bias", {experts, kHidden},
              std::vector<float>(static_cast<size_t>(experts * kHidden), 0.0f));
  return layouts;
}

TEST(MoeLayer, PerExpertFusedAndGptOssLayoutsAgree) {
  const int64_t experts = 4, top_k = 2, inter = 6, n = 5;
  ThreeLayouts layouts = three_layouts(experts, inter);
  auto backend = make_backend("cpu").value();
  const std::string config = moe_config(experts, top_k, inter);
  const ModelSource a = layouts.per_expert.source(config, *backend);
  const ModelSource b = layouts.fused.source(config, *backend);
  const ModelSource c = layouts.gpt_oss.source(config, *backend);
  MoeOptions options = moe_options_from_config(*a.config.moe);
  EXPECT_TRUE(options.routing.normalize);
  EXPECT_EQ(options.routing.top_k, top_k);
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * kHidden));
  for (float& value : x) value = dist(rng);
  std::vector<int64_t> counts;
  const std::vector<float> want = run_moe(a, options, x, &counts);
  EXPECT_EQ(counts.size(), static_cast<size_t>(experts));
  int64_t routed = 0;
  for (int64_t count : counts) routed += count;
  EXPECT_EQ(routed, n * top_k);
  EXPECT_EQ(run_moe(b, options, x), want);
  options.activation = kernels::ExpertActivation::kClampedSwiglu;
  const std::vector<float> clamped = run_moe(a, options, x);
  EXPECT_NE(clamped, want);
  options.layout = ExpertLayout::kGptOss;
  const std::vector<float> oss = run_moe(c, options, x);
  for (size_t i = 0; i < oss.size(); ++i) ASSERT_NEAR(oss[i], clamped[i], 1e-6f + 1e-6f * std::fabs(clamped[i]));
}

// A backend that keeps its own copy of every weight, as a device backend does.
class CopyingBackend final : public ForwardingBackend {
 public:
  explicit CopyingBackend(std::unique_ptr<Backend> inner) : ForwardingBackend(std::move(inner)) {}
  Result<kernels::WeightView> load_weight(const TensorView& tensor) override {
    const auto* bytes = static_cast<const uint8_t*>(tensor.data);
    TensorView copy = tensor;
    copy.data = copies_.emplace_back(bytes, bytes + tensor.size_bytes).data();
    return ForwardingBackend::load_weight(copy);
  }

 private:
  std::deque<std::vector<uint8_t>> copies_;
};

// GPT-OSS's bf16 experts ([in, out], gate and up columns interleaved) are transposed tile by tile
// in bf16 (more than one 64-wide tile each way here): the layer gives the per-expert bf16 layout's
// output. Their host copies stay only where the backend's views read them.
TEST(MoeLayer, GptOssBf16ExpertsMatchThePerExpertLayout) {
  const int64_t experts = 4, top_k = 2, inter = 70, n = 5;
  ThreeLayouts layouts = three_layouts(experts, inter);
  auto backend = make_backend("cpu").value();
  const std::string config = moe_config(experts, top_k, inter);
  const ModelSource per_expert = layouts.per_expert.source(config, *backend, DType::kBF16);
  const ModelSource gpt_oss = layouts.gpt_oss.source(config, *backend, DType::kBF16);
  MoeOptions options = moe_options_from_config(*per_expert.config.moe);
  options.activation = kernels::ExpertActivation::kClampedSwiglu;
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * kHidden));
  for (float& value : x) value = dist(rng);
  const std::vector<float> want = run_moe(per_expert, options, x);
  options.layout = ExpertLayout::kGptOss;
  const std::vector<float> got = run_moe(gpt_oss, options, x);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-6f + 1e-6f * std::fabs(want[i])) << i;

  const auto host_copy_bytes = [&](Backend& on) {
    ModelSource source = layouts.gpt_oss.source(config, on, DType::kBF16);
    return MoeLayer::load(source, "model.layers.0.mlp", kHidden, options).value().host_copy_bytes();
  };
  // gate, up and down and their biases, all in bf16, every expert.
  EXPECT_EQ(host_copy_bytes(*backend), experts * (3 * inter * kHidden + 2 * inter + kHidden) * 2);
  CopyingBackend copying(make_backend("cpu").value());
  EXPECT_EQ(host_copy_bytes(copying), 0);
}

// Records the ops a layer enqueues; optionally fails the routed experts.
class RecordingBackend final : public ForwardingBackend {
 public:
  explicit RecordingBackend(std::unique_ptr<Backend> inner) : ForwardingBackend(std::move(inner)) {}
  std::vector<std::string> calls;
  bool fail_experts = false;

  void moe_experts(const float* x, int64_t num_tokens, const int32_t* expert_ids, const float* expert_weights,
                   const kernels::MoeExperts& experts, float* workspace, int64_t* expert_token_counts,
                   float* out) override {
    if (fail_experts) throw std::runtime_error("experts failed");
    ForwardingBackend::moe_experts(x, num_tokens, expert_ids, expert_weights, experts, workspace, expert_token_counts,
                                   out);
  }

 private:
  void on_call(std::string_view op) override { calls.emplace_back(op); }
};

// The shared experts go to the side work before the routed experts are enqueued, are joined
// before their sum is added, and the output is the routed output plus the shared MLP's, bit for
// bit; a failure in the routed experts still joins the side work.
TEST(MoeLayer, SharedExpertsRunAsSideWorkBesideTheRoutedOnes) {
  const int64_t experts = 4, top_k = 2, inter = 6, shared_inter = 10, n = 3;
  ThreeLayouts layouts = three_layouts(experts, inter);
  TinyCheckpoint& checkpoint = layouts.per_expert;
  const std::string p = "model.layers.0.mlp.shared_experts.";
  checkpoint.add(p + "gate_proj.weight", {shared_inter, kHidden});
  checkpoint.add(p + "up_proj.weight", {shared_inter, kHidden});
  checkpoint.add(p + "down_proj.weight", {kHidden, shared_inter});
  RecordingBackend backend(make_backend("cpu").value());
  const ModelSource source = checkpoint.source(moe_config(experts, top_k, inter), backend);
  MoeOptions routed_only = moe_options_from_config(*source.config.moe);
  MoeOptions options = routed_only;
  options.shared_intermediate_size = shared_inter;
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * kHidden));
  for (float& value : x) value = dist(rng);

  MoeLayer layer = MoeLayer::load(source, "model.layers.0.mlp", kHidden, options).value();
  std::vector<float> scratch(static_cast<size_t>(layer.scratch_floats(n)));
  std::vector<float> out(x.size());
  backend.calls.clear();
  layer.forward(backend, x.data(), n, scratch.data(), out.data());
  const std::vector<std::string>& calls = backend.calls;
  const auto at = [&](const std::string& op) {
    return static_cast<size_t>(std::find(calls.begin(), calls.end(), op) - calls.begin());
  };
  ASSERT_LT(at("join_side_work"), calls.size());
  EXPECT_LT(at("matmul"), at("begin_side_work")) << "the router's logits come first";
  EXPECT_LT(at("begin_side_work") + 1, at("end_side_work")) << "the shared MLP is the side work";
  EXPECT_LT(at("end_side_work"), at("moe_route"));
  EXPECT_LT(at("moe_experts"), at("join_side_work"));
  EXPECT_EQ(calls.back(), "add") << "the shared output is added after the join";

  const std::vector<float> routed = run_moe(source, routed_only, x);
  GatedMlp shared = GatedMlp::load(source, "model.layers.0.mlp.shared_experts", kHidden, shared_inter, false).value();
  std::vector<float> shared_out(x.size());
  std::vector<float> shared_scratch(static_cast<size_t>(2 * n * shared_inter));
  shared.forward(backend, x.data(), n, shared_scratch.data(), shared_out.data());
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], routed[i] + shared_out[i]) << i;

  backend.fail_experts = true;
  backend.calls.clear();
  EXPECT_THROW(layer.forward(backend, x.data(), n, scratch.data(), out.data()), std::runtime_error);
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "begin_side_work"), 1);
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "end_side_work"), 1);
  EXPECT_EQ(calls.back(), "join_side_work") << "a failed routed step leaves no side work open";
}

TEST(Fp8, DecodesE4m3AndDequantisesPerBlock) {
  EXPECT_EQ(f8e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x40), 2.0f);
  EXPECT_EQ(f8e4m3_to_f32(0xB8), -1.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(f8e4m3_to_f32(0x3C), 1.5f);
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(0x7F)));
  // A [3, 5] weight of ones (0x38) in 2x2 blocks: scale_inv [2, 3].
  const std::vector<uint8_t> bits(15, 0x38);
  const std::vector<float> scales = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  TensorView weight{"w", DType::kF8E4M3, {3, 5}, bits.data(), bits.size(), "mem"};
  TensorView scale_inv{"w_scale_inv", DType::kF32, {2, 3}, scales.data(), scales.size() * 4, "mem"};
  const std::vector<float> got = dequantize_fp8(weight, scale_inv, 2, 2).value();
  const std::vector<float> want = {1, 1, 2, 2, 3, 1, 1, 2, 2, 3, 4, 4, 5, 5, 6};
  EXPECT_EQ(got, want);
  TensorView wrong = scale_inv;
  wrong.shape = {1, 3};
  const auto error = dequantize_fp8(weight, wrong, 2, 2);
  ASSERT_FALSE(error.ok());
  EXPECT_NE(error.error().message.find("w_scale_inv"), std::string::npos);
}

// An exchange that counts how the layer calls it: waited for in each call, or left on the stream
// for the forward's end (DeviceExchange::enqueue_all_to_all_v).
class CountingExchange final : public DeviceExchange {
 public:
  explicit CountingExchange(std::unique_ptr<DeviceExchange> inner) : inner_(std::move(inner)) {}
  std::string_view transport() const override { return inner_->transport(); }
  void all_to_all_v(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                    const std::vector<int64_t>& recv_counts, size_t elem_bytes) override {
    ++waited_each;
    inner_->all_to_all_v(send, send_counts, recv, recv_counts, elem_bytes);
  }
  void enqueue_all_to_all_v(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                            const std::vector<int64_t>& recv_counts, size_t elem_bytes) override {
    ++enqueued;
    inner_->enqueue_all_to_all_v(send, send_counts, recv, recv_counts, elem_bytes);
  }
  void wait_enqueued() override { inner_->wait_enqueued(); }
  int64_t waited_each = 0;
  int64_t enqueued = 0;

 private:
  std::unique_ptr<DeviceExchange> inner_;
};

// EPLB's switch between forwards (MoeLayer::stage_placement, install_placement, discard_placement)
// under expert parallelism, two ranks as threads over Gloo, for every expert layout: after each
// re-placement (experts moved, a rank holding two copies of one expert, copies given up) and after
// a dropped one each rank's output is still the one-device output bit for bit (batch-invariant
// backend), and each rank loads only the experts it did not hold. Rounds planned on the host wait
// for each transfer; rounds of fixed blocks leave theirs for the wait at the forward's end.
TEST(MoeLayer, ReplacingExpertsBetweenForwardsChangesNoOutput) {
  const int64_t experts = 4, top_k = 2, inter = 6;
  const int64_t num_tokens[2] = {5, 3};
  ThreeLayouts layouts = three_layouts(experts, inter);
  const std::string config = moe_config(experts, top_k, inter);
  BackendOptions invariant;
  invariant.batch_invariant = true;
  // Placements of 4 experts + 2 copies on 2 ranks x 3 slots, in turn, and the experts each rank
  // must load to reach them from the one before.
  const std::vector<std::vector<int32_t>> steps = {{0, 0, 1, 2, 3, 3}, {3, 2, 1, 0, 3, 2}, {1, 2, 3, 0, 1, 2}};
  const int32_t loads[3][2] = {{0, 1}, {2, 1}, {0, 1}};
  for (TinyCheckpoint* layout : {&layouts.per_expert, &layouts.fused, &layouts.gpt_oss}) {
    MoeOptions options = moe_options_from_config(*ModelConfig::parse(config, "config.json").value().moe);
    if (layout == &layouts.gpt_oss) {
      options.layout = ExpertLayout::kGptOss;
      options.activation = kernels::ExpertActivation::kClampedSwiglu;
    }
    std::unique_ptr<Backend> backends[2] = {make_backend("cpu", invariant).value(),
                                            make_backend("cpu", invariant).value()};
    ModelSource sources[2] = {layout->source(config, *backends[0]), layout->source(config, *backends[1])};
    std::vector<float> x[2], want[2];
    std::mt19937 rng(5);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (int r = 0; r < 2; ++r) {
      x[r].resize(static_cast<size_t>(num_tokens[r] * kHidden));
      for (float& value : x[r]) value = dist(rng);
      want[r] = run_moe(sources[r], options, x[r]);
    }
    testing::run_group(2, "moe-replace", std::chrono::seconds(30), [&](std::shared_ptr<Communicator> group) {
      const int32_t rank = group->rank();
      auto expert_parallel = std::make_shared<ExpertParallelism>();
      expert_parallel->group = std::move(group);
      expert_parallel->num_redundant_experts = 2;
      ModelSource source = sources[rank];
      source.expert_parallel = expert_parallel;
      // The fused layout's rows are staged through host copies of the backend's buffers, as on
      // ranks that share a GPU; the others' go through the group as they are.
      auto exchange = std::make_shared<CountingExchange>(
          layout == &layouts.fused
              ? make_staged_exchange(expert_parallel->group, *source.backend)
              : source.backend->make_device_exchange(expert_parallel->group, ExchangeTransport::kAuto).value());
      source.expert_exchange = exchange;
      MoeLayer layer = MoeLayer::load(source, "model.layers.0.mlp", kHidden, options).value();
      // Rounds planned on the device count their routed tokens in the backend's memory (a host
      // backend's memory here), the others on the host.
      DeviceBuffer routed_on_device = source.backend->allocate(experts * sizeof(int64_t));
      layer.count_routed_on_device(routed_on_device.as<int64_t>());
      const int64_t n = num_tokens[rank];
      std::vector<float> scratch(static_cast<size_t>(layer.scratch_floats(n)));
      std::vector<float> out(x[rank].size());
      // Each forward starts with the group's vote and ends with the wait for the exchanges left on
      // the stream, as in a model; rounds alternate between the exchange planned on the host (above
      // the fixed-size bound), each transfer waited for (rows there and back), and fixed-size blocks
      // planned by Backend::moe_dispatch, whose three transfers (slots, rows, results) are left
      // for that wait, through every placement.
      int64_t forwards = 0;
      const auto forward = [&] {
        const bool fixed = forwards++ % 2 == 1;
        expert_parallel->fixed_dispatch_tokens = fixed ? 256 : 0;
        expert_parallel->vote(n);
        const int64_t waited_before = exchange->waited_each;
        const int64_t enqueued_before = exchange->enqueued;
        layer.forward(*source.backend, x[rank].data(), n, scratch.data(), out.data());
        EXPECT_EQ(exchange->waited_each - waited_before, fixed ? 0 : 2) << "forward " << forwards;
        EXPECT_EQ(exchange->enqueued - enqueued_before, fixed ? 3 : 0) << "forward " << forwards;
        exchange->wait_enqueued();
      };
      int64_t device_seen = 0;
      for (int round = 0; round < 2; ++round) {
        std::fill(out.begin(), out.end(), 0.0f);
        forward();
        EXPECT_EQ(out, want[rank]) << "rank " << rank << ", contiguous placement, round " << round;
        // Round 0 is planned on the host, round 1 on the device, whose counts are totals.
        int64_t on_host = 0, on_device = 0;
        for (int64_t count : layer.take_routed_tokens()) on_host += count;
        for (int64_t e = 0; e < experts; ++e) on_device += routed_on_device.as<int64_t>()[e];
        EXPECT_EQ(on_host + on_device - device_seen, n * top_k) << "round " << round;
        EXPECT_EQ(on_host == 0, round == 1) << "round " << round;
        device_seen = on_device;
      }
      for (size_t step = 0; step < steps.size(); ++step) {
        ExpertPlacement next{static_cast<int32_t>(experts), 2, 3, steps[step]};
        auto staged = layer.stage_placement(source, next);
        ASSERT_TRUE(staged.ok()) << staged.error().message;
        EXPECT_EQ(staged->num_loaded, loads[step][rank]) << "rank " << rank << ", step " << step;
        const std::vector<int32_t> before = step == 0 ? std::vector<int32_t>{0, 1, 2, 3, 0, 1} : steps[step - 1];
        EXPECT_EQ(layer.placement().physical_to_logical, before) << "staging changes nothing";
        layer.install_placement(*source.backend, std::move(*staged));
        EXPECT_EQ(layer.placement(), next);
        for (int round = 0; round < 2; ++round) {
          std::fill(out.begin(), out.end(), 0.0f);
          forward();
          EXPECT_EQ(out, want[rank]) << "rank " << rank << ", step " << step << ", round " << round;
        }
      }
      // A staged placement dropped (another rank failed to load) leaves the layer as it was.
      const ExpertPlacement last = layer.placement();
      auto dropped = layer.stage_placement(source, ExpertPlacement::contiguous(4, 2, 2).value());
      ASSERT_TRUE(dropped.ok());
      layer.discard_placement(*source.backend, std::move(*dropped));
      EXPECT_EQ(layer.placement(), last);
      forward();
      EXPECT_EQ(out, want[rank]) << "rank " << rank << ", after a dropped placement";
      ExpertPlacement wrong{static_cast<int32_t>(experts), 2, 2, {0, 1, 2, 3}};
      EXPECT_FALSE(layer.stage_placement(source, wrong).ok());
    });
  }
}

}  // namespace
}  // namespace deepinfer
