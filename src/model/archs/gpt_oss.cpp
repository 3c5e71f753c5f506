// GPT-OSS: alternating sliding-window / full attention (layer_types), one learned sink logit per
// head, biases on q/k/v/o, yarn rope, and a mixture of experts on every layer: a router with a
// bias, softmax over the top-k router logits, experts with biases and the clamped SwiGLU
// ((up + 1) * gate * sigmoid(1.702 gate) with gate <= limit, |up| <= limit; gate and up
// interleaved in gate_up_proj). Experts load unquantised (bf16 / f32, as transformers saves
// them) or from the published checkpoints' MXFP4 (`*_blocks` / `*_scales`, quant_method "mxfp4"):
// kept packed where the backend reads MXFP4 experts (the CPU kernels; CUDA's moe_mxfp4.cu), else
// dequantised to bf16 at load, which holds those values exactly.
#include "model/archs/archs.h"
#include "model/layers/dense_decoder.h"

namespace deepinfer::archs {
namespace {

constexpr double kDefaultSwigluLimit = 7.0;  // GptOssConfig's default

}  // namespace

Result<std::unique_ptr<CausalLM>> build_gpt_oss(const ModelSource& source) {
  const ModelConfig& config = source.config;
  if (!config.moe) return Error{"config.json: " + config.architecture + " needs num_local_experts"};
  const auto limit = config.raw.find("swiglu_limit");
  if (limit != config.raw.end() && !limit->is_null() && !(limit->is_number() && limit->get<double>() > 0.0)) {
    return Error{"config.json: field 'swiglu_limit' must be a positive number, got " + limit->dump()};
  }
  DenseDecoderOptions options;
  options.qkv_bias = true;
  options.o_bias = true;
  options.attention_sinks = true;
  options.moe = moe_options_from_config(*config.moe);
  MoeOptions& moe = *options.moe;
  // Softmax over the top-k logits equals softmax over all experts renormalised over the top k.
  moe.routing.scoring = kernels::MoeScoring::kSoftmax;
  moe.routing.normalize = true;
  moe.router_name = "router";
  moe.router_bias = true;
  moe.layout = ExpertLayout::kGptOss;
  moe.activation = kernels::ExpertActivation::kClampedSwiglu;
  moe.swiglu_limit = static_cast<float>(
      limit != config.raw.end() && limit->is_number() ? limit->get<double>() : kDefaultSwigluLimit);
  return DenseDecoder::load(source, options);
}

}  // namespace deepinfer::archs
