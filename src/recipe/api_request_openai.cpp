// OpenAI Chat Completions and Completions request bodies -> ApiRequest.
#include "recipe/api_request_internal.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::api {
namespace {

// "none" | "auto" | "required" | {"type": "function", "function": {"name": ...}}.
std::optional<ApiError> parse_chat_tool_choice(const Json& body, ChatInput& input) {
  const Json* choice = find_field(body, "tool_choice");
  if (choice == nullptr) return std::nullopt;
  if (choice->is_string()) {
    const std::string& s = choice->get_ref<const std::string&>();
    if (s == "none") {
      input.tool_choice = ToolChoice::kNone;
    } else if (s == "required") {
      input.tool_choice = ToolChoice::kRequired;
    } else if (s != "auto") {
      return bad_request("tool_choice", "tool_choice: expected none, auto, required or a function, got '" + s + "'");
    }
    return std::nullopt;
  }
  const Json* function = choice->is_object() ? find_field(*choice, "function") : nullptr;
  const Json* name = function != nullptr && function->is_object() ? find_field(*function, "name") : nullptr;
  if (name == nullptr || !name->is_string()) {
    return bad_request("tool_choice", "tool_choice: expected none, auto, required or "
                                      "{\"type\": \"function\", \"function\": {\"name\": ...}}");
  }
  input.tool_choice = ToolChoice::kRequired;
  input.named_tool = name->get<std::string>();
  return std::nullopt;
}

// Fields sampling_params_from_json reads, as the client sent them.
Json sampling_subset(const Json& body, std::initializer_list<const char*> keys) {
  Json fields = Json::object();
  for (const char* key : keys) {
    if (const Json* value = find_field(body, key)) fields[key] = *value;
  }
  return fields;
}

constexpr std::initializer_list<const char*> kOpenAiSampling = {
    "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "n", "stop",
    "stop_token_ids", "ignore_eos", "min_tokens", "presence_penalty", "frequency_penalty", "repetition_penalty",
    "logit_bias", "include_stop_str_in_output", "prompt_logprobs",
    // Structured output: the engine reads and enforces these (engine/structured_output.h).
    "response_format", "guided_json", "guided_regex", "guided_grammar", "guided_choice", "structured_outputs_lenient"};

}  // namespace

ParseResult parse_chat_completions(const Json& body, const ModelContext& model) {
  ApiRequest request;
  request.kind = ApiKind::kChatCompletions;
  if (auto e = parse_common(body, request)) return *e;
  if (auto e = read_image_parts(request.kind, body, model, request.images)) return *e;
  if (auto e = check_object(body, "stream_options", "")) return *e;
  if (const Json* options = find_field(body, "stream_options")) {
    if (!request.stream) {
      return bad_request("stream_options", "stream_options: only allowed when stream is true");
    }
    if (auto e = check_bool(*options, "include_usage", "stream_options")) return *e;
    request.include_usage = options->value("include_usage", false);
  }
  auto conversation = parse_conversation(body);
  if (!conversation.ok()) return from_error(conversation.error());
  ChatInput input;
  input.conversation = std::move(*conversation);
  if (auto e = parse_chat_tool_choice(body, input)) return *e;
  if (auto e = check_object(body, "chat_template_kwargs", "")) return *e;
  if (const Json* kwargs = find_field(body, "chat_template_kwargs")) input.template_kwargs = *kwargs;
  if (auto e = check_string(body, "reasoning_effort", "")) return *e;
  if (const Json* effort = find_field(body, "reasoning_effort")) input.effort = effort->get<std::string>();
  // DeepSeek's API switch: {"thinking": {"type": "enabled" | "disabled"}}.
  if (auto e = check_object(body, "thinking", "")) return *e;
  if (const Json* thinking = find_field(body, "thinking")) {
    if (auto e = check_string(*thinking, "type", "thinking")) return *e;
    input.thinking = thinking->value("type", "enabled") != "disabled";
  }
  // logprobs: true/false with top_logprobs for chat.
  if (auto e = check_bool(body, "logprobs", "")) return *e;
  input.sampling_fields = sampling_subset(body, kOpenAiSampling);
  const bool logprobs = body.value("logprobs", false);
  if (const Json* top = find_field(body, "top_logprobs")) {
    if (!top->is_number_integer()) return wrong_type("top_logprobs", "an integer", *top);
    if (!logprobs) return bad_request("top_logprobs", "top_logprobs: needs logprobs set to true");
    input.sampling_fields["top_logprobs"] = *top;
  } else if (logprobs) {
    input.sampling_fields["logprobs"] = true;
  }
  input.max_tokens_field = find_field(body, "max_tokens") == nullptr && find_field(body, "max_completion_tokens")
                               ? "max_completion_tokens"
                               : "max_tokens";
  keep_structured_output(body, request);
  return finish_chat_request(std::move(request), std::move(input), model);
}

namespace {

// The one prompt of a Completions request: text, or token ids checked against the vocabulary.
std::optional<ApiError> read_completion_prompt(const Json& prompt, ApiRequest& request, const ModelContext& model) {
  const auto read_ids = [&](const Json& ids, const std::string& path) -> std::optional<ApiError> {
    for (size_t i = 0; i < ids.size(); ++i) {
      if (!ids[i].is_number_integer()) return wrong_type(path + "[" + std::to_string(i) + "]", "a token id", ids[i]);
      const int64_t id = ids[i].get<int64_t>();
      if (id < 0 || id >= model.vocab_size) {
        return bad_request(path + "[" + std::to_string(i) + "]",
                           path + "[" + std::to_string(i) + "]: token id " + std::to_string(id) +
                               " is outside the vocabulary (0.." + std::to_string(model.vocab_size - 1) + ")");
      }
      request.prompt_token_ids.push_back(static_cast<int32_t>(id));
    }
    request.prompt_text = model.tokenizer->decode(request.prompt_token_ids, false);
    return std::nullopt;
  };
  const auto read_text = [&](const std::string& text) -> std::optional<ApiError> {
    auto ids = model.tokenizer->encode_with_special(text);
    if (!ids.ok()) return from_error(Error{"prompt: " + ids.error().message});
    request.prompt_token_ids = model.tokenizer->add_special_tokens(*ids);
    request.prompt_text = text;
    return std::nullopt;
  };
  const std::string several =
      "prompt: only one prompt per request is supported (got a list of ";
  const std::string advice = "); send one request per prompt, and use n for several completions of one prompt";
  if (prompt.is_string()) return read_text(prompt.get<std::string>());
  if (!prompt.is_array() || prompt.empty()) {
    return wrong_type("prompt", "a string, a list of token ids, or a list of one of these", prompt);
  }
  if (prompt[0].is_number()) return read_ids(prompt, "prompt");
  if (prompt.size() > 1) return bad_request("prompt", several + std::to_string(prompt.size()) + advice);
  if (prompt[0].is_string()) return read_text(prompt[0].get<std::string>());
  if (prompt[0].is_array()) return read_ids(prompt[0], "prompt[0]");
  return wrong_type("prompt[0]", "a string or a list of token ids", prompt[0]);
}

}  // namespace

ParseResult parse_completions(const Json& body, const ModelContext& model) {
  ApiRequest request;
  request.kind = ApiKind::kCompletions;
  if (auto e = parse_common(body, request)) return *e;
  if (auto e = check_object(body, "stream_options", "")) return *e;
  if (const Json* options = find_field(body, "stream_options")) {
    if (!request.stream) return bad_request("stream_options", "stream_options: only allowed when stream is true");
    if (auto e = check_bool(*options, "include_usage", "stream_options")) return *e;
    request.include_usage = options->value("include_usage", false);
  }
  const Json* prompt = find_field(body, "prompt");
  if (prompt == nullptr) return bad_request("prompt", "prompt: missing");
  if (auto e = read_completion_prompt(*prompt, request, model)) return *e;
  if (auto e = check_bool(body, "echo", "")) return *e;
  request.echo = body.value("echo", false);
  if (const Json* suffix = find_field(body, "suffix"); suffix != nullptr && !(suffix->is_string() && suffix->empty())) {
    return bad_request("suffix", "suffix: insertion (fill-in-the-middle) is not supported");
  }
  if (const Json* best_of = find_field(body, "best_of")) {
    const Json* n = find_field(body, "n");
    if (!best_of->is_number_integer()) return wrong_type("best_of", "an integer", *best_of);
    if (best_of->get<int64_t>() != (n != nullptr && n->is_number_integer() ? n->get<int64_t>() : 1)) {
      return bad_request("best_of", "best_of: only best_of == n is supported");
    }
  }
  Json fields = sampling_subset(body, kOpenAiSampling);
  for (const char* key : {"logprobs", "skip_special_tokens"}) {
    if (const Json* value = find_field(body, key)) fields[key] = *value;
  }
  if (const Json* logprobs = find_field(body, "logprobs"); logprobs != nullptr && !logprobs->is_number_integer()) {
    return wrong_type("logprobs", "an integer (the number of top tokens)", *logprobs);
  }
  keep_structured_output(body, request);
  // OpenAI's default for Completions is 16 tokens.
  if (auto e = apply_sampling(request, fields, "max_tokens", 16, "prompt", model)) return *e;
  // Echoed prompt tokens carry logprobs too.
  if (request.echo && request.logprobs) request.sampling.prompt_logprobs = request.top_logprobs;
  return request;
}

}  // namespace deepinfer::api
