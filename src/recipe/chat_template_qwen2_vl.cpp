// Qwen2-VL and Qwen2.5-VL Instruct prompts (their shared chat_template): ChatML turns, a default
// system turn when the first message is not one, each content part in order (text as sent, an
// image as <|vision_start|><|image_pad|><|vision_end|>, whose pad Qwen2VLProcessor then repeats
// once per merged patch of that image; "Picture N: " before it with add_vision_id), no tools and
// no thinking.
#include <string>

#include "recipe/chat_template_families.h"

namespace deepinfer {

void render_qwen_vl_parts(const Message& message, bool with_images, const ChatOptions& options, size_t& image,
                          PromptBuilder& b) {
  size_t next_image = 0;
  for (size_t p = 0; p < message.content_parts.size(); ++p) {
    if (next_image < message.image_parts.size() && message.image_parts[next_image] == p) {
      ++next_image;
      if (!with_images) continue;
      if (options.add_vision_id) b.fixed("Picture " + std::to_string(image + 1) + ": ");
      b.fixed("<|vision_start|>");
      for (int32_t t = 0; t < options.image_tokens[image]; ++t) b.fixed("<|image_pad|>");
      b.fixed("<|vision_end|>");
      ++image;
    } else {
      b.text(message.content_parts[p]);
    }
  }
}

// Kept quirks: tool calls are dropped, tool results are turns of role "tool", and an assistant
// message sent as parts is written part by part like any other.
RenderResult render_qwen2_vl(const Conversation& conversation, const ChatOptions& options) {
  PromptBuilder b({"<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|image_pad|>", "<|vision_end|>"});
  size_t image = 0;
  for (size_t i = 0; i < conversation.messages.size(); ++i) {
    const Message& message = conversation.messages[i];
    if (i == 0 && message.role != Role::kSystem)
      b.fixed("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n");
    b.fixed("<|im_start|>" + std::string(role_name(message.role)) + "\n");
    if (message.content_parts.empty()) {
      b.text(content_or_empty(message));
    } else {
      render_qwen_vl_parts(message, true, options, image, b);
    }
    b.fixed("<|im_end|>\n");
  }
  if (options.add_generation_prompt) b.fixed("<|im_start|>assistant\n");
  return std::move(b).finish();
}

}  // namespace deepinfer
