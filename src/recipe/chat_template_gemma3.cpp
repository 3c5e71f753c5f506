// Gemma 3 prompts (google/gemma-3-*-it): <start_of_turn>role / <end_of_turn> turns, the assistant
// called "model", a leading system message folded into the first turn, no tools and no thinking;
// images where their parts are, as Gemma3Processor expands the template's <start_of_image>.
#include <string>
#include <string_view>

#include "recipe/chat_template_families.h"
#include "recipe/python_compat.h"

namespace deepinfer {

namespace {

// A turn's content: the content trimmed, or, for content sent as parts, each text part trimmed and
// the parts run together (the template loops over them). An image part is the template's
// <start_of_image>, which the processor replaces with "\n\n<start_of_image>", the image's
// placeholder tokens, "<end_of_image>\n\n".
void turn_content(const Message& message, const std::vector<int32_t>& image_tokens, size_t& image, PromptBuilder& b) {
  if (message.content_parts.empty()) {
    b.text(python_trim(content_or_empty(message)));
    return;
  }
  size_t next_image = 0;
  for (size_t i = 0; i < message.content_parts.size(); ++i) {
    if (next_image < message.image_parts.size() && message.image_parts[next_image] == i) {
      ++next_image;
      b.text("\n\n");
      b.fixed("<start_of_image>");
      for (int32_t t = 0; t < image_tokens[image]; ++t) b.fixed("<image_soft_token>");
      ++image;
      b.fixed("<end_of_image>");
      b.text("\n\n");
    } else {
      b.text(python_trim(message.content_parts[i]));
    }
  }
}

}  // namespace

// Kept quirks: the system text is not trimmed (each turn's content is) and of a system message
// sent as parts only the first is read; a later system message is a turn of role "system", tool
// results are turns of role "tool", and tool calls are dropped.
RenderResult render_gemma3(const Conversation& conversation, const ChatOptions& options) {
  const std::vector<Message>& messages = conversation.messages;
  std::string first_user_prefix;
  size_t first = 0;
  if (messages[0].role == Role::kSystem) {
    first_user_prefix =
        messages[0].content_parts.empty() ? content_or_empty(messages[0]) : messages[0].content_parts[0];
    first_user_prefix.append("\n\n");
    first = 1;
  }
  size_t image = 0;
  PromptBuilder b(
      {"<bos>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<image_soft_token>", "<end_of_image>"});
  b.fixed("<bos>");
  for (size_t i = first; i < messages.size(); ++i) {
    const Message& message = messages[i];
    if ((message.role == Role::kUser) != ((i - first) % 2 == 0)) {
      std::string error = "Conversation roles must alternate user/assistant/user/assistant/... (messages[";
      error.append(std::to_string(i)).append("] is ").append(role_name(message.role)).append(")");
      return Error{error};
    }
    b.fixed("<start_of_turn>");
    b.fixed(message.role == Role::kAssistant ? "model" : role_name(message.role));
    b.fixed("\n");
    if (i == first) b.text(first_user_prefix);
    turn_content(message, options.image_tokens, image, b);
    b.fixed("<end_of_turn>\n");
  }
  if (options.add_generation_prompt) b.fixed("<start_of_turn>model\n");
  return std::move(b).finish();
}

}  // namespace deepinfer
