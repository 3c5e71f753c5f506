// Family detection from a model directory, template options, and the render_chat() dispatcher.
#include "recipe/chat_template.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>

#include "core/mapped_file.h"
#include "recipe/chat_template_families.h"

namespace deepinfer {
namespace {

using Json = nlohmann::ordered_json;

struct FamilyName {
  ChatFamily family;
  std::string_view name;
};

constexpr FamilyName kFamilyNames[] = {
    {ChatFamily::kDeepSeekV3, "deepseek_v3"},
    {ChatFamily::kDeepSeekR1, "deepseek_r1"},
    {ChatFamily::kDeepSeekV31, "deepseek_v3_1"},
    {ChatFamily::kQwen3, "qwen3"},
    {ChatFamily::kLlama3, "llama3"},
    {ChatFamily::kLlama31, "llama3_1"},
    {ChatFamily::kLlama32, "llama3_2"},
    {ChatFamily::kGptOss, "gpt_oss"},
    {ChatFamily::kGemma3, "gemma3"},
    {ChatFamily::kQwen2Vl, "qwen2_vl"},
    {ChatFamily::kQwen3Vl, "qwen3_vl"},
};

std::string supported_names() {
  std::string out;
  for (const FamilyName& f : kFamilyNames) out += (out.empty() ? "" : ", ") + std::string(f.name);
  return out;
}

bool contains(std::string_view text, std::string_view needle) { return text.find(needle) != std::string_view::npos; }

Result<Json> read_json_file(const std::filesystem::path& path) {
  auto text = read_text_file(path.string());
  if (!text.ok()) return text.error();
  Json json = Json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) return Error{path.string() + ": not a JSON object"};
  return json;
}

// tokenizer_config.json's chat_template: a string, or a list of named templates ("default" wins).
std::optional<std::string> template_of_config(const Json& config) {
  const auto it = config.find("chat_template");
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array()) return std::nullopt;
  std::optional<std::string> first;
  for (const Json& entry : *it) {
    const auto name = entry.find("name");
    const auto source = entry.find("template");
    if (!entry.is_object() || source == entry.end() || !source->is_string()) continue;
    if (name != entry.end() && *name == "default") return source->get<std::string>();
    if (!first) first = source->get<std::string>();
  }
  return first;
}

bool vocabulary_has(const Json& config, std::string_view token) {
  const auto decoder = config.find("added_tokens_decoder");
  if (decoder == config.end() || !decoder->is_object()) return false;
  for (const auto& [id, entry] : decoder->items()) {
    const auto content = entry.find("content");
    if (content != entry.end() && content->is_string() && content->get_ref<const std::string&>() == token) return true;
  }
  return false;
}

// Sets *out when the variable is present (null counts as absent).
Result<void> read_bool(const Json& variables, const char* key, std::optional<bool>* out) {
  const auto it = variables.find(key);
  if (it == variables.end() || it->is_null()) return {};
  if (!it->is_boolean()) return Error{std::string(key) + ": expected true or false, got " + it->type_name()};
  *out = it->get<bool>();
  return {};
}

Result<void> read_string(const Json& variables, const char* key, std::optional<std::string>* out) {
  const auto it = variables.find(key);
  if (it == variables.end() || it->is_null()) return {};
  if (!it->is_string()) return Error{std::string(key) + ": expected a string, got " + it->type_name()};
  *out = it->get<std::string>();
  return {};
}

Result<CalendarDate> parse_date(std::string_view text) {
  CalendarDate date;
  char tail = 0;
  const std::string s(text);
  if (std::sscanf(s.c_str(), "%4d-%2d-%2d%c", &date.year, &date.month, &date.day, &tail) != 3 || s.size() != 10 ||
      date.month < 1 || date.month > 12 || date.day < 1 || date.day > 31) {
    return Error{"date: expected YYYY-MM-DD, got '" + s + "'"};
  }
  return date;
}

}  // namespace

std::string_view chat_family_name(ChatFamily family) {
  for (const FamilyName& f : kFamilyNames) {
    if (f.family == family) return f.name;
  }
  return "unknown";
}

std::optional<ChatFamily> find_chat_family(std::string_view name) {
  for (const FamilyName& f : kFamilyNames) {
    if (f.name == name) return f.family;
  }
  return std::nullopt;
}

std::optional<ChatFamily> find_chat_family_of_template(std::string_view t) {
  if (contains(t, "<|channel|>") && contains(t, "<|start|>")) return ChatFamily::kGptOss;
  if (contains(t, "<｜User｜>") && contains(t, "<｜Assistant｜>")) {
    // Each DeepSeek variant by the statements its renderer follows; a variant that matches none
    // (e.g. a later revision) is not rendered approximately.
    if (contains(t, "is_last_user") && contains(t, "thinking")) return ChatFamily::kDeepSeekV31;
    if (contains(t, "'tool_calls' in message") && contains(t, "<｜Assistant｜><think>")) return ChatFamily::kDeepSeekR1;
    if (contains(t, "message['content'] is none") && !contains(t, "think")) return ChatFamily::kDeepSeekV3;
    return std::nullopt;
  }
  // The hybrid-thinking Qwen3 template; the 2507 Instruct / Thinking ones differ in the prompt.
  if (contains(t, "<|im_start|>") && contains(t, "enable_thinking") && contains(t, "<tool_call>")) {
    return ChatFamily::kQwen3;
  }
  if (contains(t, "<start_of_turn>") && contains(t, "first_user_prefix")) return ChatFamily::kGemma3;
  if (contains(t, "<|im_start|>") && contains(t, "<|vision_start|><|image_pad|><|vision_end|>")) {
    if (!contains(t, "<tool_call>")) return ChatFamily::kQwen2Vl;
    // Qwen3-VL Instruct's; the Thinking models' (render_content, <think>) is another format.
    if (!contains(t, "<think>")) return ChatFamily::kQwen3Vl;
  }
  if (contains(t, "<|start_header_id|>")) {
    if (!contains(t, "Cutting Knowledge Date")) return ChatFamily::kLlama3;
    return contains(t, "strftime_now") ? ChatFamily::kLlama32 : ChatFamily::kLlama31;
  }
  return std::nullopt;
}

Result<ChatFamily> detect_chat_family(const std::string& model_dir) {
  const std::filesystem::path dir(model_dir);
  const auto config_path = dir / "tokenizer_config.json";
  auto config = read_json_file(config_path);
  if (!config.ok()) return Error{"cannot pick a chat format: " + config.error().message};
  std::optional<std::string> source = template_of_config(*config);
  std::string where = config_path.string();
  if (!source && std::filesystem::exists(dir / "chat_template.jinja")) {
    where = (dir / "chat_template.jinja").string();
    auto text = read_text_file(where);
    if (!text.ok()) return text.error();
    source = std::move(*text);
  }
  // Multimodal checkpoints (Qwen2.5-VL, Qwen3-VL) keep their processor's template here.
  if (!source && std::filesystem::exists(dir / "chat_template.json")) {
    where = (dir / "chat_template.json").string();
    auto processor = read_json_file(where);
    if (!processor.ok()) return processor.error();
    source = template_of_config(*processor);
  }
  if (source) {
    if (auto family = find_chat_family_of_template(*source)) return *family;
    return Error{"the chat template in " + where +
                 " is not one deepinfer renders (supported families: " + supported_names() + ")"};
  }
  // No template: the harmony vocabulary or config.json's model_type still name the format.
  if (vocabulary_has(*config, "<|channel|>")) return ChatFamily::kGptOss;
  std::string model_type;
  if (std::filesystem::exists(dir / "config.json")) {
    auto model_config = read_json_file(dir / "config.json");
    if (!model_config.ok()) return model_config.error();
    model_type = model_config->value("model_type", "");
    if (model_type == "gpt_oss") return ChatFamily::kGptOss;
    if (model_type == "qwen3" || model_type == "qwen3_moe") return ChatFamily::kQwen3;
    if (model_type == "gemma3" || model_type == "gemma3_text") return ChatFamily::kGemma3;
    if (model_type == "qwen2_5_vl" || model_type == "qwen2_vl") return ChatFamily::kQwen2Vl;
    if (model_type == "qwen3_vl") return ChatFamily::kQwen3Vl;
  }
  return Error{"cannot pick a chat format for " + model_dir + ": " + config_path.string() +
               " has no chat_template, there is no chat_template.jinja" +
               (model_type.empty() ? std::string() : ", and model_type '" + model_type + "' has several") +
               " (supported families: " + supported_names() + ")"};
}

Result<ChatOptions> parse_chat_options(const nlohmann::ordered_json& variables) {
  ChatOptions options;
  if (variables.is_null()) return options;
  if (!variables.is_object()) return Error{"chat template variables: expected an object"};
  std::optional<bool> add_generation_prompt;
  std::optional<bool> tools_in_user_message;
  std::optional<bool> add_vision_id;
  DI_TRY(read_bool(variables, "add_generation_prompt", &add_generation_prompt));
  DI_TRY(read_bool(variables, "add_vision_id", &add_vision_id));
  DI_TRY(read_bool(variables, "enable_thinking", &options.thinking));
  DI_TRY(read_bool(variables, "thinking", &options.thinking));
  DI_TRY(read_bool(variables, "tools_in_user_message", &tools_in_user_message));
  DI_TRY(read_string(variables, "reasoning_effort", &options.reasoning_effort));
  DI_TRY(read_string(variables, "model_identity", &options.model_identity));
  DI_TRY(read_string(variables, "date", &options.date));
  DI_TRY(read_string(variables, "date_string", &options.date_string));
  options.add_generation_prompt = add_generation_prompt.value_or(true);
  options.tools_in_user_message = tools_in_user_message.value_or(true);
  options.add_vision_id = add_vision_id.value_or(false);
  if (options.reasoning_effort && *options.reasoning_effort != "low" && *options.reasoning_effort != "medium" &&
      *options.reasoning_effort != "high") {
    return Error{"reasoning_effort: expected low, medium or high, got '" + *options.reasoning_effort + "'"};
  }
  if (options.date) DI_TRY(parse_date(*options.date));
  return options;
}

Result<std::vector<PromptSegment>> render_chat_request(ChatFamily family, const nlohmann::ordered_json& request,
                                                       int32_t image_tokens) {
  auto conversation = parse_conversation(request);
  if (!conversation.ok()) return conversation.error();
  Json variables = Json::object();
  if (const auto kwargs = request.find("chat_template_kwargs"); kwargs != request.end() && !kwargs->is_null()) {
    if (!kwargs->is_object()) return Error{"chat_template_kwargs: expected an object"};
    variables = *kwargs;
  }
  for (const char* key : {"add_generation_prompt", "reasoning_effort"}) {
    if (request.contains(key) && !variables.contains(key)) variables[key] = request[key];
  }
  auto options = parse_chat_options(variables);
  if (!options.ok()) return options.error();
  size_t images = 0;
  for (const Message& message : conversation->messages) images += message.image_parts.size();
  if (images > 0 && image_tokens == kImageTokensBySize) {
    return Error{
        "this model's images take as many tokens as their size gives, and images are not decoded here: "
        "a generation request's usage counts them"};
  }
  if (image_tokens > 0) options->image_tokens.assign(images, image_tokens);
  auto segments = render_chat(family, *conversation, *options);
  if (!segments.ok()) return Error{std::string(chat_family_name(family)) + " template: " + segments.error().message};
  return segments;
}

Result<CalendarDate> chat_date(const ChatOptions& options) {
  if (options.date) return parse_date(*options.date);
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  return CalendarDate{local.tm_year + 1900, local.tm_mon + 1, local.tm_mday};
}

Result<std::vector<PromptSegment>> render_chat(ChatFamily family, const Conversation& conversation,
                                               const ChatOptions& options) {
  if (conversation.messages.empty()) return Error{"messages: must not be empty"};
  size_t images = 0;
  for (const Message& message : conversation.messages) images += message.image_parts.size();
  if (images > 0 && family != ChatFamily::kGemma3 && family != ChatFamily::kQwen2Vl && family != ChatFamily::kQwen3Vl) {
    return Error{"the " + std::string(chat_family_name(family)) + " template places no images"};
  }
  if (images > options.image_tokens.size()) return Error{"the served model takes no images"};
  switch (family) {
    case ChatFamily::kDeepSeekV3:
      return render_deepseek_v3(conversation, options);
    case ChatFamily::kDeepSeekR1:
      return render_deepseek_r1(conversation, options);
    case ChatFamily::kDeepSeekV31:
      return render_deepseek_v31(conversation, options);
    case ChatFamily::kQwen3:
      return render_qwen3(conversation, options);
    case ChatFamily::kLlama3:
      return render_llama3(conversation, options);
    case ChatFamily::kLlama31:
      return render_llama31(conversation, options, 31);
    case ChatFamily::kLlama32:
      return render_llama31(conversation, options, 32);
    case ChatFamily::kGptOss:
      return render_gpt_oss(conversation, options);
    case ChatFamily::kGemma3:
      return render_gemma3(conversation, options);
    case ChatFamily::kQwen2Vl:
      return render_qwen2_vl(conversation, options);
    case ChatFamily::kQwen3Vl:
      return render_qwen3_vl(conversation, options);
  }
  return Error{"unknown chat family"};
}

}  // namespace deepinfer
