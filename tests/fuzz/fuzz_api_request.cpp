// libFuzzer target: arbitrary bytes as the body of a request to one API (DEEPINFER_FUZZ_API, set per
// target in CMakeLists.txt), read as the server reads it (JSON, then parse_api_request). Every body
// either converts or gets a 4xx error; a converted one fits the vocabulary and the context. The
// body's "model" picks the chat family to render with (find_chat_family; Qwen3 otherwise), so one
// corpus reaches every template.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "recipe/api.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace deepinfer;
using Json = nlohmann::ordered_json;

constexpr int32_t kMaxModelLen = 2048;

const char* tokenizer_name(ChatFamily family) {
  switch (family) {
    case ChatFamily::kDeepSeekV3:
    case ChatFamily::kDeepSeekR1:
    case ChatFamily::kDeepSeekV31: return "deepseek_v3";
    case ChatFamily::kLlama3:
    case ChatFamily::kLlama31:
    case ChatFamily::kLlama32: return "llama3";
    case ChatFamily::kGptOss: return "gptoss";
    case ChatFamily::kQwen3:
    case ChatFamily::kQwen2Vl:
    case ChatFamily::kQwen3Vl: return "qwen3";
    case ChatFamily::kGemma3: return "llama3";  // no Gemma tokenizer installed: any encodes the prompt
  }
  return "qwen3";
}

const Tokenizer& load_tokenizer(const char* name) {
  static std::map<std::string, Tokenizer> loaded;
  auto it = loaded.find(name);
  if (it != loaded.end()) return it->second;
  auto result = Tokenizer::load(std::string(DEEPINFER_TOKENIZERS_DIR) + "/tokenizer-" + name + "/models");
  if (!result.ok()) {
    std::fprintf(stderr, "fuzz_api_request: %s (run make deps)\n", result.error().message.c_str());
    std::abort();
  }
  return loaded.emplace(name, std::move(result).value()).first->second;
}

ModelContext model_context(const Json& body) {
  ChatFamily family = ChatFamily::kQwen3;
  const auto model = body.find("model");
  if (model != body.end() && model->is_string()) {
    family = find_chat_family(model->get_ref<const std::string&>()).value_or(ChatFamily::kQwen3);
  }
  const Tokenizer& t = load_tokenizer(tokenizer_name(family));
  return ModelContext{"tiny", &t, family, kMaxModelLen, t.vocab_size(), nullptr, 0, 128, {}};
}

void check_request(const ApiRequest& request, const ModelContext& model) {
  const int64_t num_prompt = static_cast<int64_t>(request.prompt_token_ids.size());
  if (num_prompt == 0 || num_prompt + request.sampling.max_tokens > model.max_model_len) std::abort();
  for (int32_t id : request.prompt_token_ids) {
    if (id < 0 || id >= model.vocab_size) std::abort();
  }
}

void check_error(const ApiError& error) {
  if (error.status < 400 || error.status >= 500 || error.message.empty()) std::abort();
  if (Json::parse(error_body(DEEPINFER_FUZZ_API, error), nullptr, false).is_discarded()) std::abort();
}

}  // namespace

// Loading a tokenizer takes seconds under the sanitizers: all load here, outside the per-input timeout.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  for (const char* name : {"qwen3", "deepseek_v3", "llama3", "gptoss"}) load_tokenizer(name);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The server answers a body that is not a JSON object before the recipe sees it.
  const Json body = Json::parse(data, data + size, nullptr, false);
  if (body.is_discarded() || !body.is_object()) return 0;
  const ModelContext model = model_context(body);
  auto parsed = parse_api_request(DEEPINFER_FUZZ_API, body, model);
  if (const ApiError* error = std::get_if<ApiError>(&parsed)) {
    check_error(*error);
  } else {
    check_request(std::get<ApiRequest>(parsed), model);
  }
  return 0;
}
