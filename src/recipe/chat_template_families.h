// The per-family renderers behind render_chat(), one source file each, and what they share.
#pragma once

#include <vector>

#include "core/result.h"
#include "recipe/chat_template.h"

namespace deepinfer {

using RenderResult = Result<std::vector<PromptSegment>>;

RenderResult render_deepseek_v3(const Conversation& conversation, const ChatOptions& options);
RenderResult render_deepseek_r1(const Conversation& conversation, const ChatOptions& options);
RenderResult render_deepseek_v31(const Conversation& conversation, const ChatOptions& options);
RenderResult render_qwen3(const Conversation& conversation, const ChatOptions& options);
RenderResult render_llama3(const Conversation& conversation, const ChatOptions& options);
// version: 31 (date fixed by the template) or 32 (date from the clock).
RenderResult render_llama31(const Conversation& conversation, const ChatOptions& options, int version);
RenderResult render_gpt_oss(const Conversation& conversation, const ChatOptions& options);
RenderResult render_gemma3(const Conversation& conversation, const ChatOptions& options);
RenderResult render_qwen2_vl(const Conversation& conversation, const ChatOptions& options);
RenderResult render_qwen3_vl(const Conversation& conversation, const ChatOptions& options);
// Qwen's tools block of the system turn ("# Tools ... </tool_call><|im_end|>\n": Qwen3's and
// Qwen3-VL's templates, the same text), each tool as Python's json.dumps.
void render_qwen_tools(const std::vector<nlohmann::ordered_json>& tools, PromptBuilder& b);
// Qwen's <tool_call> JSON blocks of an assistant turn (Qwen3's and Qwen3-VL's templates): a newline
// before each, but before the first when the turn has no content.
void render_qwen_tool_calls(const std::vector<ToolCall>& calls, bool has_content, PromptBuilder& b);
// A message's content parts in order as Qwen-VL's templates write them: text as sent, an image as
// <|vision_start|>, its options.image_tokens pads and <|vision_end|> ("Picture N: " before it with
// add_vision_id), or nothing where !with_images. image: the images written so far.
void render_qwen_vl_parts(const Message& message, bool with_images, const ChatOptions& options, size_t& image,
                          PromptBuilder& b);

struct CalendarDate {
  int year = 0;
  int month = 0;  // 1-12
  int day = 0;
};
// options.date parsed (YYYY-MM-DD), or today in local time as strftime_now() sees it.
Result<CalendarDate> chat_date(const ChatOptions& options);

// The content as a template that does string operations on it sees it: none becomes "" (the
// serving front end's rule for every family except DeepSeek, whose templates test for none).
inline const std::string& content_or_empty(const Message& message) {
  static const std::string kEmpty;
  return message.content ? *message.content : kEmpty;
}

}  // namespace deepinfer
