// libFuzzer target: arbitrary bytes as a model's config.json (ModelConfig::parse). Every input
// either parses or returns an error; a parsed config has a positive shape, one sliding-window
// entry per layer, and answers is_moe_layer for each of its layers.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "weights/hf_config.h"

namespace {
volatile int64_t g_sink = 0;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace deepinfer;
  auto config = ModelConfig::parse(std::string(reinterpret_cast<const char*>(data), size), "config.json");
  if (!config.ok()) return 0;
  if (config->num_hidden_layers <= 0 || config->head_dim <= 0 || config->num_key_value_heads <= 0 ||
      static_cast<int64_t>(config->layer_sliding_window.size()) != config->num_hidden_layers) {
    std::abort();
  }
  if (config->moe) {
    for (int64_t layer = 0; layer < config->num_hidden_layers; ++layer) g_sink = g_sink + config->moe->is_moe_layer(layer);
  }
  return 0;
}
