// deepinfer-hf-to-gguf: converts a Hugging Face Llama / Mistral / Qwen2 / Qwen3 / Qwen3-MoE
// checkpoint to a GGUF file llama.cpp loads (same weights and dtype, synthetic vocabulary), for
// `make bench` and the GPU comparisons.
// Usage: deepinfer-hf-to-gguf --model DIR --out FILE.gguf [--dtype f16|bf16|f32]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "dense_layout.h"
#include "gguf_writer.h"
#include "moe_layout.h"
#include "tool_flags.h"
#include "weights/safetensors.h"

namespace deepinfer::bench {
namespace {

constexpr const char* kUsage =
    "usage: deepinfer-hf-to-gguf --model DIR --out FILE.gguf [--dtype f16|bf16|f32]\n"
    "Converts a Llama, Mistral, Qwen2, Qwen3 or Qwen3-MoE checkpoint to GGUF for llama.cpp. Matrices\n"
    "keep their dtype (bf16, f16, f32), or take --dtype's, converted while written (bf16 weights of\n"
    "ordinary magnitude are exact in f16); a MoE layer's experts are stacked into one tensor per projection;\n"
    "norms and biases become f32 as llama.cpp expects. The vocabulary is synthetic (byte-level tokens\n"
    "then placeholders): enough to benchmark, not to tokenize text.\n";

// llama_ftype values (llama.h) for the file's dominant type.
constexpr uint32_t kFileTypeAllF32 = 0;
constexpr uint32_t kFileTypeMostlyF16 = 1;
constexpr uint32_t kFileTypeMostlyBF16 = 32;
// llama_token_type values.
constexpr int32_t kTokenNormal = 1;
constexpr int32_t kTokenControl = 3;

std::string utf8(uint32_t code_point) {
  std::string out;
  if (code_point < 0x80) {
    out += static_cast<char>(code_point);
  } else if (code_point < 0x800) {
    out += static_cast<char>(0xc0 | (code_point >> 6));
    out += static_cast<char>(0x80 | (code_point & 0x3f));
  } else {
    out += static_cast<char>(0xe0 | (code_point >> 12));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (code_point & 0x3f));
  }
  return out;
}

// A vocabulary llama.cpp's byte-level BPE accepts: the 256 byte tokens first, spelled with
// GPT-2's printable stand-ins (so any text, "\n" included, tokenizes to bytes), then unique
// placeholders up to vocab_size.
std::vector<std::string> synthetic_vocab(int64_t vocab_size) {
  std::vector<std::string> tokens;
  uint32_t next_stand_in = 256;
  for (uint32_t byte = 0; byte < 256 && static_cast<int64_t>(tokens.size()) < vocab_size; ++byte) {
    const bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xa1 && byte <= 0xac) || byte >= 0xae;
    tokens.push_back(utf8(printable ? byte : next_stand_in++));
  }
  while (static_cast<int64_t>(tokens.size()) < vocab_size) tokens.push_back("<tok_" + std::to_string(tokens.size()) + ">");
  return tokens;
}

void add_vocab(const ModelConfig& config, bool add_bos, GgufWriter& gguf) {
  std::vector<int32_t> types(static_cast<size_t>(config.vocab_size), kTokenNormal);
  auto in_vocab = [&](int64_t id) { return id >= 0 && id < config.vocab_size; };
  gguf.add_string("tokenizer.ggml.model", "gpt2");
  gguf.add_string("tokenizer.ggml.pre", "default");
  gguf.add_string_array("tokenizer.ggml.tokens", synthetic_vocab(config.vocab_size));
  if (config.bos_token_id && in_vocab(*config.bos_token_id)) {
    types[*config.bos_token_id] = kTokenControl;
    gguf.add_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(*config.bos_token_id));
  }
  if (!config.eos_token_ids.empty() && in_vocab(config.eos_token_ids[0])) {
    types[config.eos_token_ids[0]] = kTokenControl;
    gguf.add_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(config.eos_token_ids[0]));
  }
  gguf.add_i32_array("tokenizer.ggml.token_type", types);
  gguf.add_string_array("tokenizer.ggml.merges", {});
  gguf.add_bool("tokenizer.ggml.add_bos_token", add_bos);
}

Result<void> add_hparams(const ModelConfig& config, const DenseLayout& layout, GgufWriter& gguf) {
  const std::string& arch = layout.gguf_arch;
  auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  gguf.add_string("general.architecture", arch);
  gguf.add_string("general.name", "deepinfer " + layout.family + " conversion");
  gguf.add_u32(arch + ".vocab_size", u32(config.vocab_size));
  gguf.add_u32(arch + ".context_length", u32(config.max_position_embeddings));
  gguf.add_u32(arch + ".embedding_length", u32(config.hidden_size));
  gguf.add_u32(arch + ".block_count", u32(config.num_hidden_layers));
  gguf.add_u32(arch + ".feed_forward_length", u32(config.intermediate_size));
  gguf.add_u32(arch + ".attention.head_count", u32(config.num_attention_heads));
  gguf.add_u32(arch + ".attention.head_count_kv", u32(config.num_key_value_heads));
  gguf.add_u32(arch + ".attention.key_length", u32(config.head_dim));
  gguf.add_u32(arch + ".attention.value_length", u32(config.head_dim));
  gguf.add_u32(arch + ".rope.dimension_count", u32(config.head_dim));
  gguf.add_f32(arch + ".rope.freq_base", static_cast<float>(config.rope.theta));
  gguf.add_f32(arch + ".attention.layer_norm_rms_epsilon", static_cast<float>(config.rms_norm_eps));
  if (config.moe) {
    const MoeConfig& moe = *config.moe;
    // llama.cpp's qwen3moe graph: every layer routed, softmax top-k renormalised, no shared expert.
    for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
      if (!moe.is_moe_layer(layer)) return Error{"llama.cpp's " + arch + " graph wants every layer a MoE layer"};
    }
    if (!moe.norm_topk_prob)
      return Error{"llama.cpp's " + arch + " graph renormalises the top-k weights (norm_topk_prob)"};
    if (moe.num_shared_experts > 0) return Error{"llama.cpp's " + arch + " graph has no shared experts"};
    gguf.add_u32(arch + ".expert_count", u32(moe.num_experts));
    gguf.add_u32(arch + ".expert_used_count", u32(moe.num_experts_per_tok));
    gguf.add_u32(arch + ".expert_feed_forward_length", u32(moe.moe_intermediate_size));
  }
  if (config.rope.partial_rotary_factor != 1.0) return Error{"partial rotary embeddings are not supported"};
  if (config.rope.type == RopeType::kLinear) {
    gguf.add_string(arch + ".rope.scaling.type", "linear");
    gguf.add_f32(arch + ".rope.scaling.factor", static_cast<float>(config.rope.factor));
  } else if (config.rope.type != RopeType::kDefault) {
    return Error{"rope scaling other than linear is not supported by this converter"};
  }
  for (int32_t window : config.layer_sliding_window) {
    if (window != 0) {
      std::fprintf(stderr, "deepinfer-hf-to-gguf: note: llama.cpp's %s graph ignores the sliding window (%d)\n",
                   arch.c_str(), window);
      break;
    }
  }
  return {};
}

// Reorders the rows of each head of a q/k projection from transformers' rotate-half rope layout
// (first halves, then second halves) to the interleaved pairs llama.cpp's `llama` graph uses:
// new row 2*i + j of a head takes old row j*head_dim/2 + i.
std::vector<uint8_t> interleave_rope_rows(const uint8_t* src, int64_t rows, size_t row_bytes, int64_t num_heads) {
  std::vector<uint8_t> dst(static_cast<size_t>(rows) * row_bytes);
  const int64_t head_dim = rows / num_heads;
  for (int64_t h = 0; h < num_heads; ++h) {
    for (int64_t i = 0; i < head_dim / 2; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t to = h * head_dim + 2 * i + j;
        const int64_t from = h * head_dim + j * (head_dim / 2) + i;
        std::memcpy(&dst[to * row_bytes], src + from * row_bytes, row_bytes);
      }
    }
  }
  return dst;
}

Result<void> run(int argc, char** argv) {
  auto flags = parse_tool_flags(argc, argv, {"--model", "--out", "--dtype"});
  if (!flags.ok()) return flags.error();
  if (!flags->count("--model") || !flags->count("--out")) return Error{"--model and --out are required"};
  const std::string model_dir = flags->at("--model");
  const std::string out_path = flags->at("--out");
  std::optional<GgmlType> matrix_type;  // none: each matrix keeps its checkpoint's dtype
  if (flags->count("--dtype")) {
    const std::string& name = flags->at("--dtype");
    if (name == "f16") matrix_type = GgmlType::kF16;
    if (name == "bf16") matrix_type = GgmlType::kBF16;
    if (name == "f32") matrix_type = GgmlType::kF32;
    if (!matrix_type) return Error{"--dtype must be f16, bf16 or f32, got '" + name + "'"};
  }
  const auto start = std::chrono::steady_clock::now();

  auto config = ModelConfig::load(model_dir);
  if (!config.ok()) return config.error();
  auto layout = config->moe ? moe_layout(*config) : dense_layout(*config);
  if (!layout.ok()) return Error{model_dir + "/config.json: " + layout.error().message};
  if (layout->gguf_arch.empty()) {
    return Error{model_dir + "/config.json: " + layout->family +
                 " has no GGUF layout here (Llama, Mistral, Qwen2, Qwen3 and Qwen3-MoE do)"};
  }
  auto store = WeightStore::open_dir(model_dir);
  if (!store.ok()) return store.error();

  GgufWriter gguf;
  DI_TRY(add_hparams(*config, *layout, gguf));
  std::vector<std::vector<uint8_t>> converted;  // tensors rewritten here; the rest stay in the mapping
  uint32_t file_type = kFileTypeAllF32;
  // One GGUF tensor per name, in order of first appearance: several transformers tensors under one
  // name (a layer's experts) are stacked along a new first dimension.
  std::vector<std::string> names;
  std::map<std::string, std::vector<const DenseTensor*>> members;
  for (const DenseTensor& spec : layout->tensors) {
    auto& list = members[spec.gguf_name];
    if (list.empty()) names.push_back(spec.gguf_name);
    list.push_back(&spec);
  }
  for (const std::string& name : names) {
    const std::vector<const DenseTensor*>& specs = members[name];
    GgmlType type = GgmlType::kF32;
    std::vector<GgufWriter::Piece> pieces;
    for (const DenseTensor* spec : specs) {
      auto view = store->get(spec->hf_name, spec->shape);
      if (!view.ok()) return view.error();
      if (view->dtype != DType::kF32 && view->dtype != DType::kBF16 && view->dtype != DType::kF16) {
        return Error{spec->hf_name + " in " + view->file + " has dtype " + std::string(dtype_name(view->dtype)) +
                     ", expected F32, BF16 or F16"};
      }
      const uint8_t* data = static_cast<const uint8_t*>(view->data);
      DType dtype = view->dtype;
      const GgmlType piece_type = spec->role != TensorRole::kMatrix ? GgmlType::kF32
                                  : matrix_type                     ? *matrix_type
                                  : view->dtype == DType::kBF16     ? GgmlType::kBF16
                                  : view->dtype == DType::kF16      ? GgmlType::kF16
                                                                    : GgmlType::kF32;
      if (!pieces.empty() && piece_type != type) return Error{name + ": its stacked tensors differ in dtype"};
      type = piece_type;
      if (spec->hf_name == "model.embed_tokens.weight" && type != GgmlType::kF32) {
        file_type = type == GgmlType::kBF16 ? kFileTypeMostlyBF16 : kFileTypeMostlyF16;
      }
      if (spec->role != TensorRole::kMatrix && view->dtype != DType::kF32) {
        std::vector<uint8_t> f32(static_cast<size_t>(view->numel()) * sizeof(float));
        convert_to_f32(view->data, view->dtype, static_cast<size_t>(view->numel()),
                       reinterpret_cast<float*>(f32.data()));
        data = converted.emplace_back(std::move(f32)).data();
        dtype = DType::kF32;
      }
      const size_t size_bytes = static_cast<size_t>(view->numel()) * dtype_size_bytes(dtype);
      if (spec->num_rope_heads > 0) {
        const int64_t rows = spec->shape[0];
        data = converted.emplace_back(interleave_rope_rows(data, rows, size_bytes / rows, spec->num_rope_heads)).data();
      }
      pieces.push_back({data, view->numel(), dtype});
    }
    std::vector<int64_t> shape = specs.front()->shape;
    if (specs.size() > 1) shape.insert(shape.begin(), static_cast<int64_t>(specs.size()));
    gguf.add_tensor(name, type, shape, std::move(pieces));
  }
  gguf.add_u32("general.file_type", file_type);
  add_vocab(*config, layout->gguf_arch == "llama", gguf);

  DI_TRY(gguf.write(out_path));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("wrote %s: %s, %zu tensors, %.2f GB, in %.1f s\n", out_path.c_str(), layout->gguf_arch.c_str(),
              gguf.num_tensors(), store->total_bytes() * 1e-9, seconds);
  return {};
}

}  // namespace
}  // namespace deepinfer::bench

int main(int argc, char** argv) {
  return deepinfer::bench::tool_main(argc, argv, "deepinfer-hf-to-gguf", deepinfer::bench::kUsage, &deepinfer::bench::run);
}
