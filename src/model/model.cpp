// load_model: config.json -> registry -> architecture builder; image_input_format and
// load_image_encoder; ExpertTokenCounts' summaries.
#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <numeric>

#include "core/check.h"
#include "model/archs/archs.h"
#include "model/expert_parallel.h"
#include "model/image_encoder_model.h"
#include "model/layers/linear.h"

namespace deepinfer {

Result<std::unique_ptr<CausalLM>> load_model(const std::string& dir, Backend& backend, bool show_progress,
                                             std::shared_ptr<const ExpertParallelism> expert_parallel) {
  auto config = ModelConfig::load(dir);
  if (!config.ok()) return config.error();
  const archs::Builder builder = archs::find_builder(config->architecture);
  if (builder == nullptr) {
    std::string known;
    for (const std::string& name : archs::registered_architectures()) known += (known.empty() ? "" : ", ") + name;
    return Error{dir + "/config.json: architecture '" + config->architecture + "' is not supported; supported: " +
                 known};
  }
  auto weights = WeightStore::open_dir(dir, show_progress);
  if (!weights.ok()) return weights.error();
  ModelSource source;
  source.config = std::move(*config);
  source.weights = std::make_shared<const WeightStore>(std::move(*weights));
  source.backend = &backend;
  source.arena = std::make_shared<WeightArena>();
  if (expert_parallel) {
    auto exchange = backend.make_device_exchange(expert_parallel->group, expert_parallel->transport);
    if (!exchange.ok()) return exchange.error();
    source.expert_exchange = std::move(*exchange);
  }
  source.expert_parallel = std::move(expert_parallel);
  return builder(source);
}

std::vector<std::string> supported_architectures() { return archs::registered_architectures(); }

namespace {

// The multimodal architectures: how their config places images, and their encoder alone.
struct ImageArchitecture {
  Result<ImageInputFormat> (*format)(const ModelConfig&);
  archs::ImageEncoderBuilder encoder;
};

// Null when the config's architecture reads no images (or its vision part is absent).
const ImageArchitecture* image_architecture(const ModelConfig& config) {
  static constexpr ImageArchitecture kGemma3{&archs::gemma3_image_format, &archs::build_gemma3_image_encoder};
  static constexpr ImageArchitecture kQwen2_5_Vl{&archs::qwen_vl_image_format, &archs::build_qwen2_5_vl_image_encoder};
  static constexpr ImageArchitecture kQwen3Vl{&archs::qwen_vl_image_format, &archs::build_qwen3_vl_image_encoder};
  if (config.architecture == "Gemma3ForConditionalGeneration" && config.vision) return &kGemma3;
  if (config.architecture == "Qwen2_5_VLForConditionalGeneration" && config.qwen2_vl_vision) return &kQwen2_5_Vl;
  if (config.architecture == "Qwen3VLForConditionalGeneration" && config.qwen2_vl_vision) return &kQwen3Vl;
  return nullptr;
}

}  // namespace

Result<std::optional<ImageInputFormat>> image_input_format(const ModelConfig& config) {
  const ImageArchitecture* architecture = image_architecture(config);
  if (architecture == nullptr) return std::optional<ImageInputFormat>();
  auto format = architecture->format(config);
  if (!format.ok()) return format.error();
  return std::optional<ImageInputFormat>(*format);
}

Result<ImageEncoderModel> load_image_encoder(const std::string& dir, Backend& backend, bool show_progress) {
  auto config = ModelConfig::load(dir);
  if (!config.ok()) return config.error();
  const ImageArchitecture* architecture = image_architecture(*config);
  if (architecture == nullptr) {
    return Error{dir + "/config.json: architecture '" + config->architecture +
                 "' has no image encoder to serve (Gemma3ForConditionalGeneration, "
                 "Qwen2_5_VLForConditionalGeneration and Qwen3VLForConditionalGeneration with a vision_config "
                 "have one)"};
  }
  auto weights = WeightStore::open_dir(dir, show_progress);
  if (!weights.ok()) return weights.error();
  ModelSource source;
  source.config = std::move(*config);
  source.weights = std::make_shared<const WeightStore>(std::move(*weights));
  source.backend = &backend;
  source.arena = std::make_shared<WeightArena>();
  auto encoder = architecture->encoder(source);
  if (!encoder.ok()) return encoder.error();
  return ImageEncoderModel{std::move(source.config), std::move(*encoder), std::move(source.weights),
                           std::move(source.arena)};
}

size_t ExpertTokenCounts::busiest_count(double fraction, size_t num_experts) {
  return static_cast<size_t>(std::ceil(fraction * static_cast<double>(num_experts)));
}

double ExpertTokenCounts::busiest_share(double fraction) const {
  int64_t busiest = 0;
  int64_t total = 0;
  for (std::vector<int64_t> layer : counts) {
    const size_t top = busiest_count(fraction, layer.size());
    std::sort(layer.begin(), layer.end(), std::greater<>());
    busiest =
        std::accumulate(layer.begin(), layer.begin() + static_cast<ptrdiff_t>(std::min(top, layer.size())), busiest);
    total = std::accumulate(layer.begin(), layer.end(), total);
  }
  return total > 0 ? static_cast<double>(busiest) / static_cast<double>(total) : 0.0;
}

double ExpertTokenCounts::busiest_over_mean() const {
  double sum = 0.0;
  int32_t layers = 0;
  for (const std::vector<int64_t>& layer : counts) {
    const int64_t total = std::accumulate(layer.begin(), layer.end(), int64_t{0});
    if (total == 0) continue;
    sum += static_cast<double>(*std::max_element(layer.begin(), layer.end())) * static_cast<double>(layer.size()) /
           static_cast<double>(total);
    ++layers;
  }
  return layers > 0 ? sum / layers : 0.0;
}

ForwardBatch contiguous_sequence_batch(const std::vector<int32_t>& tokens, int32_t first_position,
                                       int32_t num_blocks) {
  ForwardBatch batch;
  batch.token_ids = tokens;
  const auto count = static_cast<int32_t>(tokens.size());
  for (int32_t i = 0; i < count; ++i) {
    batch.positions.push_back(first_position + i);
    batch.slot_mapping.push_back(first_position + i);
    batch.logit_rows.push_back(i);
  }
  batch.query_start = {0, count};
  batch.seq_len = {first_position + count};
  batch.max_blocks_per_seq = num_blocks;
  for (int32_t b = 0; b < num_blocks; ++b) batch.block_table.push_back(b);
  return batch;
}

void CausalLM::forward_draft(const ForwardBatch& /*batch*/, const std::vector<int32_t>& /*hidden_rows*/,
                             DraftInput /*input*/, const DraftOutputs& /*outputs*/) {
  DI_CHECK(false, "this model has no draft module (num_draft_modules() is 0)");
}

}  // namespace deepinfer
