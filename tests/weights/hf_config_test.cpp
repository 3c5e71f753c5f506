// config.json parsing. The configs are published checkpoints' files (old format, as on the
// Hub) and the same configs as transformers 5 saves them; the expected values follow the
// transformers configuration classes (layer_types rules, defaults).
#include "weights/hf_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "test_files.h"

namespace deepinfer {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

ModelConfig parse_ok(const std::string& text) {
  Result<ModelConfig> config = ModelConfig::parse(text, "config.json");
  EXPECT_TRUE(config.ok()) << config.error().message;
  return config.ok() ? config.value() : ModelConfig{};
}

std::string parse_error(const std::string& text) {
  Result<ModelConfig> config = ModelConfig::parse(text, "config.json");
  EXPECT_FALSE(config.ok());
  return config.ok() ? "" : config.error().message;
}

void expect_same_config(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.architecture, b.architecture);
  EXPECT_EQ(a.model_type, b.model_type);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.num_hidden_layers, b.num_hidden_layers);
  EXPECT_EQ(a.num_attention_heads, b.num_attention_heads);
  EXPECT_EQ(a.num_key_value_heads, b.num_key_value_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_TRUE(a.rope == b.rope);
  EXPECT_EQ(a.sliding_rope.has_value(), b.sliding_rope.has_value());
  if (a.sliding_rope && b.sliding_rope) {
    EXPECT_TRUE(*a.sliding_rope == *b.sliding_rope);
  }
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.attention_bias, b.attention_bias);
  EXPECT_EQ(a.layer_sliding_window, b.layer_sliding_window);
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.eos_token_ids, b.eos_token_ids);
  EXPECT_EQ(a.bos_token_id, b.bos_token_id);
}

// meta-llama/Llama-3.1-8B-Instruct's config.json.
const char* kLlama31Old = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256})";

// The same model saved by transformers 5: rope_parameters holds rope_theta, dtype replaces torch_dtype.
const char* kLlama31New = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "dtype": "bfloat16", "eos_token_id": [128001, 128008, 128009],
  "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 14336, "max_position_embeddings": 131072, "mlp_bias": false,
  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_parameters": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                      "original_max_position_embeddings": 8192, "rope_theta": 500000.0,
                      "rope_type": "llama3"},
  "tie_word_embeddings": false, "transformers_version": "5.0.0", "use_cache": true,
  "vocab_size": 128256})";

TEST(HfConfigTest, ParsesLlama31) {
  const ModelConfig c = parse_ok(kLlama31Old);
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 14336);
  EXPECT_EQ(c.num_hidden_layers, 32);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);  // hidden_size / num_attention_heads
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope.type, RopeType::kLlama3);
  EXPECT_EQ(c.rope.theta, 500000.0);
  EXPECT_EQ(c.rope.factor, 8.0);
  EXPECT_EQ(c.rope.low_freq_factor, 1.0);
  EXPECT_EQ(c.rope.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 8192);
  EXPECT_FALSE(c.sliding_rope.has_value());
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.layer_sliding_window, std::vector<int32_t>(32, 0));
  EXPECT_EQ(c.dtype, DType::kBF16);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(c.raw.at("pretraining_tp"), 1);
}

TEST(HfConfigTest, OldAndNewFormatsGiveTheSameConfig) {
  expect_same_config(parse_ok(kLlama31Old), parse_ok(kLlama31New));
}

// deepseek-ai/DeepSeek-V3's yarn, old format ("type") and transformers 5.
TEST(HfConfigTest, YarnOldAndNew) {
  const std::string shape = R"("hidden_size": 7168, "intermediate_size": 18432, "num_hidden_layers": 61,
      "num_attention_heads": 128, "num_key_value_heads": 128, "vocab_size": 129280,
      "max_position_embeddings": 163840, "model_type": "deepseek_v3", "bos_token_id": 0, "eos_token_id": 1,)";
  const ModelConfig old_format = parse_ok("{" + shape + R"(
      "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                       "original_max_position_embeddings": 4096, "type": "yarn"},
      "rope_theta": 10000, "torch_dtype": "bfloat16"})");
  const ModelConfig new_format = parse_ok("{" + shape + R"(
      "rope_parameters": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 40.0, "mscale": 1.0,
                          "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                          "rope_theta": 10000.0, "rope_type": "yarn"},
      "dtype": "bfloat16"})");
  expect_same_config(old_format, new_format);
  EXPECT_EQ(old_format.rope.type, RopeType::kYarn);
  EXPECT_EQ(old_format.rope.factor, 40.0);
  EXPECT_EQ(old_format.rope.mscale_all_dim, 1.0);
  EXPECT_EQ(old_format.rope.original_max_position_embeddings, 4096);
  EXPECT_FALSE(old_format.rope.attention_factor.has_value());
  EXPECT_TRUE(old_format.rope.truncate);
  EXPECT_EQ(old_format.eos_token_ids, std::vector<int64_t>{1});
}

// Qwen/Qwen2.5-7B-Instruct: sliding_window is set but use_sliding_window is false.
const char* kQwen25 = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 3584, "initializer_range": 0.02,
  "intermediate_size": 18944, "max_position_embeddings": 32768, "max_window_layers": 28,
  "model_type": "qwen2", "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.43.1", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 152064})";

TEST(HfConfigTest, Qwen2HasBiasesAndNoWindowUnlessEnabled) {
  const ModelConfig c = parse_ok(kQwen25);
  EXPECT_TRUE(c.attention_bias);  // no attention_bias field: Qwen2 always has q/k/v biases
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.rope.type, RopeType::kDefault);
  EXPECT_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.layer_sliding_window, std::vector<int32_t>(28, 0));
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{151645});
}

std::string small_config(const std::string& model_type, const std::string& extra) {
  return R"({"model_type": ")" + model_type + R"(", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 128,
             "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2)" +
         (extra.empty() ? "" : ", " + extra) + "}";
}

// Qwen2Config: layers at or after max_window_layers use the window (not the first ones).
TEST(HfConfigTest, Qwen2WindowFromMaxWindowLayers) {
  const ModelConfig c =
      parse_ok(small_config("qwen2", R"("use_sliding_window": true, "sliding_window": 4096, "max_window_layers": 4)"));
  EXPECT_EQ(c.layer_sliding_window, (std::vector<int32_t>{0, 0, 0, 0, 4096, 4096}));
  const ModelConfig qwen3 =
      parse_ok(small_config("qwen3", R"("use_sliding_window": true, "sliding_window": 64, "max_window_layers": 2)"));
  EXPECT_EQ(qwen3.layer_sliding_window, (std::vector<int32_t>{0, 0, 64, 64, 64, 64}));
  EXPECT_FALSE(qwen3.attention_bias);
  // Absent max_window_layers: transformers' default of 28 leaves these 6 layers all full.
  EXPECT_EQ(parse_ok(small_config("qwen2", R"("use_sliding_window": true, "sliding_window": 64)")).layer_sliding_window,
            std::vector<int32_t>(6, 0));
  // Qwen2MoeConfig: odd-numbered (1-based) layers below max_window_layers.
  const ModelConfig moe = parse_ok(
      small_config("qwen2_moe", R"("use_sliding_window": true, "sliding_window": 32, "max_window_layers": 4)"));
  EXPECT_EQ(moe.layer_sliding_window, (std::vector<int32_t>{32, 0, 32, 0, 0, 0}));
  EXPECT_TRUE(moe.attention_bias);  // qkv_bias defaults to true
}

TEST(HfConfigTest, LayerTypesTakePrecedence) {
  const std::string types =
      R"("layer_types": ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention",
                         "full_attention", "full_attention"])";
  const std::vector<int32_t> expected = {128, 0, 128, 128, 0, 0};
  EXPECT_EQ(parse_ok(small_config("qwen2", R"("use_sliding_window": true, "sliding_window": 128,
                                              "max_window_layers": 0, )" +
                                               types))
                .layer_sliding_window,
            expected);
  EXPECT_EQ(parse_ok(small_config("gpt_oss", R"("sliding_window": 128, )" + types)).layer_sliding_window, expected);
  // Qwen2 with use_sliding_window false has no window whatever layer_types says.
  EXPECT_EQ(parse_ok(small_config("qwen2", R"("sliding_window": 128, )" + types)).layer_sliding_window,
            std::vector<int32_t>(6, 0));
  EXPECT_THAT(parse_error(small_config("mistral", R"("sliding_window": 128, "layer_types": ["full_attention"])")),
              AllOf(HasSubstr("config.json: field 'layer_types' must be a list of 6 strings")));
}

// mistralai/Mistral-7B-v0.1 windows every layer; later Mistral configs set sliding_window to null.
TEST(HfConfigTest, MistralWindowsEveryLayer) {
  EXPECT_EQ(parse_ok(small_config("mistral", R"("sliding_window": 4096)")).layer_sliding_window,
            std::vector<int32_t>(6, 4096));
  EXPECT_EQ(parse_ok(small_config("mistral", R"("sliding_window": null)")).layer_sliding_window,
            std::vector<int32_t>(6, 0));
  EXPECT_EQ(
      parse_ok(small_config("qwen3_moe", R"("use_sliding_window": true, "sliding_window": 8)")).layer_sliding_window,
      std::vector<int32_t>(6, 8));
  EXPECT_EQ(parse_ok(small_config("gemma2", R"("sliding_window": 16)")).layer_sliding_window,
            (std::vector<int32_t>{16, 0, 16, 0, 16, 0}));
}

// google/gemma-3-1b-it (old format) and as transformers 5 saves it (rope per layer type).
TEST(HfConfigTest, Gemma3PatternAndLocalRope) {
  const std::string shape = R"("architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
      "head_dim": 256, "hidden_size": 1152, "intermediate_size": 6912, "max_position_embeddings": 32768,
      "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1, "rms_norm_eps": 1e-06,
      "sliding_window": 512, "vocab_size": 262144, "bos_token_id": 2, "eos_token_id": [1, 106],)";
  const ModelConfig old_format = parse_ok("{" + shape + R"( "rope_local_base_freq": 10000, "rope_scaling": null,
      "rope_theta": 1000000, "sliding_window_pattern": 6, "torch_dtype": "bfloat16"})");
  std::string layer_types;
  for (int i = 0; i < 26; ++i)
    layer_types += std::string(i ? ", " : "") + ((i + 1) % 6 ? "\"sliding_attention\"" : "\"full_attention\"");
  const ModelConfig new_format = parse_ok("{" + shape + R"( "dtype": "bfloat16", "layer_types": [)" + layer_types +
                                          R"(], "rope_parameters": {
      "full_attention": {"rope_theta": 1000000.0, "rope_type": "default"},
      "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}}})");
  expect_same_config(old_format, new_format);
  EXPECT_TRUE(old_format.tie_word_embeddings);  // Gemma's default when the field is absent
  EXPECT_EQ(old_format.rope.theta, 1e6);
  ASSERT_TRUE(old_format.sliding_rope.has_value());
  EXPECT_EQ(old_format.sliding_rope->theta, 1e4);
  for (int i = 0; i < 26; ++i) EXPECT_EQ(old_format.layer_sliding_window[i], (i + 1) % 6 ? 512 : 0) << "layer " << i;
}

TEST(HfConfigTest, NestedTextConfig) {
  const ModelConfig c = parse_ok(R"({"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
      "eos_token_id": [1, 106], "torch_dtype": "bfloat16",
      "text_config": {"model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240,
                      "num_hidden_layers": 34, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                      "vocab_size": 262208, "sliding_window": 1024, "rope_theta": 1000000.0,
                      "rope_scaling": {"factor": 8.0, "rope_type": "linear"}}})");
  EXPECT_EQ(c.model_type, "gemma3");
  EXPECT_EQ(c.hidden_size, 2560);
  EXPECT_EQ(c.rope.type, RopeType::kLinear);
  EXPECT_EQ(c.rope.factor, 8.0);
  EXPECT_EQ(c.layer_sliding_window[4], 1024);
  EXPECT_EQ(c.layer_sliding_window[5], 0);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{1, 106}));
  EXPECT_EQ(parse_error(R"({"model_type": "gemma3", "text_config": {"hidden_size": 8}})"),
            "config.json: field 'text_config.vocab_size' is missing");
}

TEST(HfConfigTest, MissingAndMistypedFields) {
  EXPECT_EQ(parse_error(R"({"vocab_size": 10, "hidden_size": 8, "intermediate_size": 16, "num_attention_heads": 2})"),
            "config.json: field 'num_hidden_layers' is missing");
  EXPECT_EQ(parse_error(small_config("llama", R"("hidden_size": "abc")")),
            "config.json: field 'hidden_size' must be a positive integer, got \"abc\"");
  EXPECT_EQ(parse_error(R"({"vocab_size": 10, "hidden_size": 0, "intermediate_size": 16, "num_hidden_layers": 1,
                           "num_attention_heads": 2})"),
            "config.json: field 'hidden_size' must be a positive integer, got 0");
  // A corrupt layer count is an error, not a per-layer table of that size (bad_alloc ended the process).
  EXPECT_EQ(parse_error(R"({"vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
                           "num_hidden_layers": 4000000000000, "num_attention_heads": 2})"),
            "config.json: field 'num_hidden_layers' must be at most 65536, got 4000000000000");
  EXPECT_EQ(parse_error(small_config("llama", R"("num_key_value_heads": 2.5)")),
            "config.json: field 'num_key_value_heads' must be a positive integer, got 2.5");
  EXPECT_EQ(parse_error(small_config("llama", R"("rms_norm_eps": "small")")),
            "config.json: field 'rms_norm_eps' must be a positive number, got \"small\"");
  EXPECT_EQ(parse_error(small_config("llama", R"("tie_word_embeddings": 1)")),
            "config.json: field 'tie_word_embeddings' must be true or false, got 1");
  EXPECT_EQ(parse_error(small_config("llama", R"("eos_token_id": [2, "x"])")),
            "config.json: field 'eos_token_id' must be a non-negative integer or a list of them, got [2,\"x\"]");
  EXPECT_EQ(parse_error(small_config("llama", R"("torch_dtype": "float64")")),
            "config.json: field 'torch_dtype' must be one of float32, bfloat16, float16, got \"float64\"");
  EXPECT_THAT(parse_error(small_config("llama", R"("architectures": "LlamaForCausalLM")")),
              HasSubstr("field 'architectures' must be a list of class names"));
  EXPECT_THAT(parse_error(small_config("llama", R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0})")),
              HasSubstr("field 'rope_scaling.low_freq_factor' is missing"));
  EXPECT_THAT(parse_error(small_config("llama", R"("rope_scaling": {"rope_type": "linear"})")),
              HasSubstr("field 'rope_scaling.factor' is missing"));
  EXPECT_THAT(parse_error(small_config("llama", R"("rope_parameters": {"rope_type": "yarn", "factor": -4})")),
              HasSubstr("field 'rope_parameters.factor' must be a positive number, got -4"));
}

TEST(HfConfigTest, UnknownRopeTypeNamesTheSupportedOnes) {
  EXPECT_EQ(parse_error(small_config("phi3", R"("rope_scaling": {"type": "longrope", "short_factor": [1.0]})")),
            "config.json: field 'rope_scaling.type' is \"longrope\", which deepinfer does not support; supported "
            "RoPE types: default, linear, dynamic, llama3, yarn");
}

TEST(HfConfigTest, HeadsAndDefaults) {
  EXPECT_EQ(parse_error(small_config("llama", R"("num_key_value_heads": 3)")),
            "config.json: num_attention_heads (4) must be a multiple of num_key_value_heads (3)");
  const ModelConfig c = parse_ok(R"({"vocab_size": 10, "hidden_size": 48, "intermediate_size": 16,
                                     "num_hidden_layers": 1, "num_attention_heads": 3, "head_dim": null,
                                     "num_key_value_heads": null, "eos_token_id": null, "rope_scaling": null})");
  EXPECT_EQ(c.num_key_value_heads, 3);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_TRUE(c.eos_token_ids.empty());
  EXPECT_FALSE(c.bos_token_id.has_value());
  EXPECT_FALSE(c.dtype.has_value());
  EXPECT_EQ(c.rope, RopeConfig{});
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.max_position_embeddings, 0);
  EXPECT_THAT(parse_error(R"({"vocab_size": 10, "hidden_size": 50, "intermediate_size": 16,
                              "num_hidden_layers": 1, "num_attention_heads": 3})"),
              HasSubstr("hidden_size (50) is not a multiple of num_attention_heads (3)"));
  // Configs written by Python sometimes carry integral floats.
  EXPECT_EQ(parse_ok(small_config("llama", R"("max_position_embeddings": 4096.0)")).max_position_embeddings, 4096);
}

TEST(HfConfigTest, InvalidJsonGivesThePosition) {
  EXPECT_THAT(parse_error("{\n  \"hidden_size\": 4096,\n  \"vocab_size\": ,\n}"),
              AllOf(HasSubstr("config.json: invalid JSON"), HasSubstr("line 3, column 17")));
  EXPECT_EQ(parse_error("[1, 2]"), "config.json: expected a JSON object, got array");
}

TEST(HfConfigTest, LoadReadsConfigJsonFromTheDirectory) {
  testing::TempDir dir;
  Result<ModelConfig> missing = ModelConfig::load(dir.path());
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.error().message, AllOf(HasSubstr(dir.file("config.json")), HasSubstr("needs a config.json")));
  testing::write_file(dir.file("config.json"), kQwen25);
  Result<ModelConfig> loaded = ModelConfig::load(dir.path());
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(loaded->vocab_size, 152064);
  testing::write_file(dir.file("config.json"), small_config("llama", R"("vocab_size": -1)"));
  EXPECT_EQ(ModelConfig::load(dir.path()).error().message,
            dir.file("config.json") + ": field 'vocab_size' must be a positive integer, got -1");
}

}  // namespace
}  // namespace deepinfer
