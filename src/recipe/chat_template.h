// Chat-prompt rendering: one native renderer per model family, each reproducing that family's
// official Jinja chat_template byte for byte (quirks included; tests compare against the real
// templates), with the output split into special and text segments.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "recipe/conversation.h"
#include "recipe/prompt.h"

namespace deepinfer {

enum class ChatFamily {
  kDeepSeekV3,   // DeepSeek-V3 (2024-12): no thinking, tool calls in ```json blocks
  kDeepSeekR1,   // DeepSeek-R1: always thinks, history keeps only the text after </think>
  kDeepSeekV31,  // DeepSeek-V3.1: hybrid, `thinking` switches <think> / </think>
  kQwen3,        // Qwen3: hybrid, `enable_thinking`, tools as <tool_call> JSON
  kLlama3,       // Llama 3 / 3.1 base-style template: headers only, no tools
  kLlama31,      // Llama 3.1 / 3.3 Instruct: tools, "Today Date" fixed at 26 Jul 2024
  kLlama32,      // Llama 3.2 Instruct: as 3.1, "Today Date" from the clock
  kGptOss,       // GPT-OSS harmony: channels, reasoning effort, TypeScript tool namespace
  kGemma3,       // Gemma 3 Instruct: <start_of_turn> turns, the system text in the first one, no tools
  kQwen2Vl,      // Qwen2-VL / Qwen2.5-VL Instruct: ChatML, a default system turn, images, no tools
  kQwen3Vl,      // Qwen3-VL Instruct: ChatML, no default system turn, images, tools as <tool_call> JSON
};

// The family's name as the CLI and tests spell it ("deepseek_v3", "qwen3", "gpt_oss", ...).
std::string_view chat_family_name(ChatFamily family);
std::optional<ChatFamily> find_chat_family(std::string_view name);

// Picks the family of a Hugging Face model directory from its chat template
// (tokenizer_config.json "chat_template", or chat_template.jinja), then its vocabulary, then
// config.json's model_type. Errors name the files read and the families supported.
Result<ChatFamily> detect_chat_family(const std::string& model_dir);
// The same decision from a template's source text; nullopt when no family matches.
std::optional<ChatFamily> find_chat_family_of_template(std::string_view chat_template);

// The template variables a request may set (vLLM's chat_template_kwargs); each family reads only
// its own, the rest are ignored as the Jinja templates ignore unknown variables.
struct ChatOptions {
  bool add_generation_prompt = true;
  // Qwen3 "enable_thinking" (default on), DeepSeek-V3.1 "thinking" (default off); either key
  // sets it for both families.
  std::optional<bool> thinking;
  std::optional<std::string> reasoning_effort;  // GPT-OSS: "low" | "medium" (default) | "high"
  std::optional<std::string> model_identity;    // GPT-OSS system line
  // The clock as YYYY-MM-DD (GPT-OSS "Current date", Llama 3.2 "Today Date"); today when unset.
  std::optional<std::string> date;
  std::optional<std::string> date_string;  // Llama 3.1+ "Today Date" verbatim, e.g. "26 Jul 2024"
  bool tools_in_user_message = true;       // Llama 3.1+: tool list in the first user turn
  bool add_vision_id = false;              // Qwen2-VL: "Picture N: " before each image
  // The placeholder tokens each image takes, in the conversation's order (the served model's
  // ImageInputFormat::tokens_for each image); fewer entries than images: the conversation is refused.
  std::vector<int32_t> image_tokens;
};

// Reads ChatOptions from a JSON object of template variables (add_generation_prompt, thinking,
// enable_thinking, reasoning_effort, model_identity, date, date_string, tools_in_user_message,
// add_vision_id).
Result<ChatOptions> parse_chat_options(const nlohmann::ordered_json& variables);

// A whole OpenAI chat request ({"messages", "tools", "chat_template_kwargs",
// "add_generation_prompt", "reasoning_effort"}) rendered with the family's template; the template
// variables are chat_template_kwargs plus the top-level add_generation_prompt and reasoning_effort
// (the kwargs win, as in vLLM). Errors name the request field or the template's complaint.
// image_tokens: the placeholders every image takes (ChatOptions::image_tokens; 0: images refused;
// kImageTokensBySize: the model's images take as many as their size gives, which a request's JSON
// alone does not tell, so they are refused naming that).
inline constexpr int32_t kImageTokensBySize = -1;
Result<std::vector<PromptSegment>> render_chat_request(ChatFamily family, const nlohmann::ordered_json& request,
                                                       int32_t image_tokens = 0);

// Renders the conversation as the family's template would. Errors are the template's own
// raise_exception cases (e.g. Llama 3.1 with several tool calls in one message) and tool-call
// arguments that are not JSON where the template needs them parsed.
Result<std::vector<PromptSegment>> render_chat(ChatFamily family, const Conversation& conversation,
                                               const ChatOptions& options);

}  // namespace deepinfer
