// load_model: config.json -> registry -> architecture builder.
#include "model/model.h"

#include "core/check.h"

#include "model/archs/archs.h"
#include "model/layers/linear.h"

namespace deepinfer {

Result<std::unique_ptr<CausalLM>> load_model(const std::string& dir, Backend& backend, bool show_progress) {
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
  return builder(source);
}

std::vector<std::string> supported_architectures() { return archs::registered_architectures(); }

void CausalLM::forward_draft(const ForwardBatch& /*batch*/, const std::vector<int32_t>& /*hidden_rows*/,
                             DraftInput /*input*/, float* /*logits*/, float* /*confidence*/) {
  DI_CHECK(false, "this model has no draft module (num_draft_modules() is 0)");
}

}  // namespace deepinfer
