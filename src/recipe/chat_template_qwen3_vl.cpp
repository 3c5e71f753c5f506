// Qwen3-VL Instruct prompts (its chat_template): ChatML without a default system turn, tools as
// Qwen2.5's <tools> system block and <tool_call> JSON, each content part of a user or tool message in
// order (text as sent, an image as <|vision_start|><|image_pad|><|vision_end|>, whose pad
// Qwen3VLProcessor then repeats once per merged patch; "Picture N: " before it with
// add_vision_id), the text parts only of system and assistant messages, and no thinking.
#include <string>

#include "recipe/chat_template_families.h"

namespace deepinfer {
namespace {

// A message's content as the template writes it: the string, or its parts in order, each image's
// tokens where with_images (the others' images are dropped, as the template writes only text parts).
void render_content(const Message& message, bool with_images, const ChatOptions& options, size_t& image,
                    PromptBuilder& b) {
  if (message.content_parts.empty()) {
    b.text(content_or_empty(message));
    return;
  }
  render_qwen_vl_parts(message, with_images, options, image, b);
}

}  // namespace

// Kept quirks: a system message that is not the first is not written at all, and the tool-call
// separator tests the content as sent (a list of parts counts even when its text is empty).
RenderResult render_qwen3_vl(const Conversation& conversation, const ChatOptions& options) {
  PromptBuilder b({"<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
                   "<|vision_start|>", "<|image_pad|>", "<|vision_end|>"});
  const std::vector<Message>& messages = conversation.messages;
  size_t image = 0;
  const Message& first = messages.front();
  if (!conversation.tools.empty()) {
    b.fixed("<|im_start|>system\n");
    if (first.role == Role::kSystem) {
      render_content(first, false, options, image, b);
      b.fixed("\n\n");
    }
    render_qwen_tools(conversation.tools, b);
  } else if (first.role == Role::kSystem) {
    b.fixed("<|im_start|>system\n");
    render_content(first, false, options, image, b);
    b.fixed("<|im_end|>\n");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const Message& message = messages[i];
    const bool is_last = i + 1 == messages.size();
    switch (message.role) {
      case Role::kSystem:
        break;
      case Role::kUser:
        b.fixed("<|im_start|>user\n");
        render_content(message, true, options, image, b);
        b.fixed("<|im_end|>\n");
        break;
      case Role::kAssistant: {
        b.fixed("<|im_start|>assistant\n");
        render_content(message, false, options, image, b);
        const bool has_content = !message.content_parts.empty() || !content_or_empty(message).empty();
        render_qwen_tool_calls(message.tool_calls, has_content, b);
        b.fixed("<|im_end|>\n");
        break;
      }
      case Role::kTool:
        if (i == 0 || messages[i - 1].role != Role::kTool) b.fixed("<|im_start|>user");
        b.fixed("\n<tool_response>\n");
        render_content(message, true, options, image, b);
        b.fixed("\n</tool_response>");
        if (is_last || messages[i + 1].role != Role::kTool) b.fixed("<|im_end|>\n");
        break;
    }
  }
  if (options.add_generation_prompt) b.fixed("<|im_start|>assistant\n");
  return std::move(b).finish();
}

}  // namespace deepinfer
