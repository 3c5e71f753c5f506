// The request conversion's shared tail: field checks, rendering and special-token-safe encoding,
// sampling parameters, context-length bounds and output-parsing settings per family.
#include <algorithm>

#include "core/check.h"
#include "engine/sampling_json.h"
#include "recipe/api_request_internal.h"
#include "recipe/prompt.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace api {

ApiError bad_request(std::string param, std::string message) {
  return ApiError{400, "invalid_request_error", std::move(param), std::move(message)};
}

ApiError from_error(const Error& error) {
  const std::string& m = error.message;
  std::string param;
  if (m.starts_with("field '")) {
    param = m.substr(7, m.find('\'', 7) - 7);
  } else if (const size_t colon = m.find(": "); colon != std::string::npos && m.find(' ') > colon) {
    param = m.substr(0, colon);
  } else if (const size_t space = m.find(' '); m.compare(space + 1, 8, "must be ") == 0 ||
                                                 m.compare(space + 1, 9, "is empty;") == 0) {
    param = m.substr(0, space);  // SamplingParams::validate: "<field> must be ..."
  }
  return bad_request(std::move(param), m);
}

ApiError wrong_type(const std::string& path, const std::string& expected, const Json& got) {
  return bad_request(path, path + ": expected " + expected + ", got " + got.type_name());
}

const Json* find_field(const Json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

namespace {

template <typename Pred>
std::optional<ApiError> check(const Json& object, const char* key, const std::string& path, const char* expected,
                              Pred pred) {
  const Json* value = find_field(object, key);
  if (value == nullptr || pred(*value)) return std::nullopt;
  return wrong_type(path.empty() ? key : path + "." + key, expected, *value);
}

}  // namespace

std::optional<ApiError> check_string(const Json& object, const char* key, const std::string& path) {
  return check(object, key, path, "a string", [](const Json& v) { return v.is_string(); });
}
std::optional<ApiError> check_bool(const Json& object, const char* key, const std::string& path) {
  return check(object, key, path, "true or false", [](const Json& v) { return v.is_boolean(); });
}
std::optional<ApiError> check_object(const Json& object, const char* key, const std::string& path) {
  return check(object, key, path, "an object", [](const Json& v) { return v.is_object(); });
}
std::optional<ApiError> check_array(const Json& object, const char* key, const std::string& path) {
  return check(object, key, path, "a list", [](const Json& v) { return v.is_array(); });
}

std::optional<ApiError> parse_common(const Json& body, ApiRequest& request) {
  const Json* model = find_field(body, "model");
  if (model == nullptr) return bad_request("model", "model: missing (the name of the served model)");
  if (!model->is_string()) return wrong_type("model", "a string", *model);
  request.model = model->get<std::string>();
  if (auto e = check_bool(body, "stream", "")) return e;
  if (const Json* stream = find_field(body, "stream")) request.stream = stream->get<bool>();
  if (auto e = check_string(body, "cache_salt", "")) return e;
  if (const Json* salt = find_field(body, "cache_salt")) request.cache_salt = salt->get<std::string>();
  if (const Json* kv_class = find_field(body, "kv_cache_class")) {
    const std::string name = kv_class->is_string() ? kv_class->get<std::string>() : "";
    if (name == "chat") {
      request.kv_cache_class = TrafficClass::kChat;
    } else if (name == "agent") {
      request.kv_cache_class = TrafficClass::kAgent;
    } else if (name != "default") {
      return bad_request("kv_cache_class", "kv_cache_class: expected \"chat\", \"agent\" or \"default\", got " +
                                               kv_class->dump());
    }
  }
  if (const Json* priority = find_field(body, "priority")) {
    if (!priority->is_number_integer()) return wrong_type("priority", "an integer", *priority);
    request.priority = priority->get<int32_t>();
  }
  return std::nullopt;
}

void keep_structured_output(const Json& body, ApiRequest& request) {
  for (const char* key : {"response_format", "guided_json", "guided_regex", "guided_choice", "guided_grammar"}) {
    const Json* value = find_field(body, key);
    if (value == nullptr) continue;
    if (value->is_object() && value->value("type", "") == "text") continue;
    request.structured_output = Json{{key, *value}};
    return;
  }
}

std::optional<ApiError> apply_sampling(ApiRequest& request, const Json& fields, const char* max_tokens_field,
                                       int32_t default_max_tokens, const char* prompt_field, const ModelContext& model) {
  const int32_t num_prompt = static_cast<int32_t>(request.prompt_token_ids.size());
  if (num_prompt == 0) return bad_request(prompt_field, std::string(prompt_field) + ": the prompt is empty");
  if (num_prompt >= model.max_model_len) {
    return bad_request(prompt_field, "This model's maximum context length is " + std::to_string(model.max_model_len) +
                                         " tokens, but the prompt has " + std::to_string(num_prompt) +
                                         " tokens. Please shorten the " + prompt_field + ".");
  }
  SamplingParams defaults = request.sampling;
  const int32_t left = model.max_model_len - num_prompt;
  defaults.max_tokens = default_max_tokens > 0 ? std::min(default_max_tokens, std::max(left, 1)) : left;
  if (model.default_max_tokens > 0) defaults.max_tokens = std::min(defaults.max_tokens, model.default_max_tokens);
  auto sampling = sampling_params_from_json(nlohmann::json(fields), defaults);
  if (!sampling.ok()) {
    ApiError error = from_error(sampling.error());
    if (error.param == "max_tokens" && error.param != max_tokens_field) {
      // The client's name for the field (max_output_tokens, max_completion_tokens).
      error.param = max_tokens_field;
      for (size_t at = error.message.find("max_tokens"); at != std::string::npos;
           at = error.message.find("max_tokens", at + error.param.size())) {
        error.message.replace(at, 10, error.param);
      }
    }
    return error;
  }
  request.sampling = std::move(*sampling);
  if (num_prompt + request.sampling.max_tokens > model.max_model_len) {
    return bad_request(max_tokens_field,
                       "This model's maximum context length is " + std::to_string(model.max_model_len) +
                           " tokens. However, you requested " +
                           std::to_string(num_prompt + request.sampling.max_tokens) + " tokens (" +
                           std::to_string(num_prompt) + " in the prompt, " +
                           std::to_string(request.sampling.max_tokens) + " in " + max_tokens_field +
                           "). Please reduce the length of the prompt or " + max_tokens_field + ".");
  }
  if (auto valid = request.sampling.validate(model.vocab_size); !valid.ok()) return from_error(valid.error());
  if (request.sampling.n > model.max_n) {
    return bad_request("n", "n must be at most " + std::to_string(model.max_n) + " on this server (--max-n), got " +
                                std::to_string(request.sampling.n));
  }
  if (request.sampling.logprobs) {
    request.logprobs = true;
    request.top_logprobs = *request.sampling.logprobs;
  }
  return collect_structured_warnings(request);
}

namespace {

// The template variables: chat_template_kwargs win over the API's own switches.
Result<ChatOptions> chat_options(ChatFamily family, const ChatInput& input) {
  Json variables = input.template_kwargs;
  const bool has_thinking_kwarg = variables.contains("thinking") || variables.contains("enable_thinking");
  std::optional<bool> thinking = input.thinking;
  if (!thinking && input.effort && *input.effort == "none") thinking = false;
  if (thinking && !has_thinking_kwarg) variables["thinking"] = *thinking;
  if (family == ChatFamily::kGptOss && input.effort && !variables.contains("reasoning_effort")) {
    const std::string& e = *input.effort;
    variables["reasoning_effort"] = e == "none" || e == "minimal" ? "low" : e == "xhigh" || e == "max" ? "high" : e;
  }
  return parse_chat_options(variables);
}

// Whether the rendered prompt asks the model to reason, and where its output starts.
void set_parsing(ChatFamily family, const ChatOptions& options, bool tools, ApiRequest& request) {
  OutputParsing& p = request.parsing;
  p.parse_tool_calls = tools;
  switch (family) {
    case ChatFamily::kDeepSeekR1:
      request.thinking = p.parse_reasoning = p.starts_in_reasoning = true;
      break;
    case ChatFamily::kDeepSeekV31:
      request.thinking = p.starts_in_reasoning = options.thinking.value_or(false);
      p.parse_reasoning = true;
      break;
    case ChatFamily::kQwen3:
      request.thinking = options.thinking.value_or(true);
      p.parse_reasoning = true;
      break;
    case ChatFamily::kGptOss:
      request.thinking = p.parse_reasoning = true;
      break;
    default:
      break;
  }
}

}  // namespace

ParseResult finish_chat_request(ApiRequest request, ChatInput input, const ModelContext& model) {
  Conversation& conversation = input.conversation;
  if (input.tool_choice == ToolChoice::kNone) conversation.tools.clear();
  if (!input.named_tool.empty()) {
    std::erase_if(conversation.tools, [&](const Json& tool) {
      return tool["function"].value("name", "") != input.named_tool;
    });
    if (conversation.tools.empty()) {
      return bad_request("tool_choice", "tool_choice: no tool named '" + input.named_tool + "' was given in tools");
    }
  }
  if (input.tool_choice == ToolChoice::kRequired && conversation.tools.empty()) {
    return bad_request("tool_choice", "tool_choice: a tool call was required but no tools were given");
  }
  auto options = chat_options(model.family, input);
  if (!options.ok()) return from_error(options.error());
  if (model.image_input != nullptr) {
    for (const ImageInput& image : request.images)
      options->image_tokens.push_back(model.image_input->tokens_for(image.grid));
  }
  auto segments = render_chat(model.family, conversation, *options);
  if (!segments.ok()) {
    return bad_request(input.prompt_field, std::string(chat_family_name(model.family)) +
                                               " chat template: " + segments.error().message);
  }
  auto ids = encode_prompt(*model.tokenizer, *segments, model.pool);
  if (!ids.ok()) return from_error(ids.error());
  request.prompt_token_ids = std::move(*ids);
  if (auto error = place_images(request, model, input.prompt_field)) return *error;
  request.prompt_text = prompt_text(*segments);
  set_parsing(model.family, *options, !conversation.tools.empty(), request);
  // The parser reads the family's markers, special tokens included.
  request.sampling.skip_special_tokens = false;
  if (auto error = apply_sampling(request, input.sampling_fields, input.max_tokens_field, 0, input.prompt_field, model)) {
    return *error;
  }
  if (auto error = constrain_tool_calls(request, conversation.tools, input.tool_choice == ToolChoice::kRequired, model)) {
    return *error;
  }
  return request;
}

}  // namespace api

std::variant<ApiRequest, ApiError> parse_api_request(ApiKind kind, const nlohmann::ordered_json& body,
                                                     const ModelContext& model) {
  DI_CHECK(model.tokenizer != nullptr && model.max_model_len > 0 && model.vocab_size > 0,
           "ModelContext needs a tokenizer, max_model_len and vocab_size");
  if (!body.is_object()) {
    return api::bad_request("", std::string("the request body must be a JSON object, got ") + body.type_name());
  }
  // The readers check each field's type and name it; a check one of them still lacks surfaces as
  // nlohmann's type_error, which is the client's mistake too (a 400, not the server's 500).
  try {
    switch (kind) {
      case ApiKind::kChatCompletions:
        return api::parse_chat_completions(body, model);
      case ApiKind::kCompletions:
        return api::parse_completions(body, model);
      case ApiKind::kResponses:
        return api::parse_responses(body, model);
      case ApiKind::kMessages:
        return api::parse_messages(body, model);
    }
  } catch (const nlohmann::json::type_error& e) {
    const std::string what = e.what();
    const size_t start = what.find("] ");
    return api::bad_request("", "a field of the request has the wrong type: " +
                                    (start == std::string::npos ? what : what.substr(start + 2)));
  }
  return api::bad_request("", "unknown API");
}

}  // namespace deepinfer
