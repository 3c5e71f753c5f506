// Gemma 3 prompts (google/gemma-3-*-it): <start_of_turn>role / <end_of_turn> turns, the assistant
// called "model", a leading system message folded into the first turn, no tools and no thinking.
#include <string>
#include <string_view>

#include "recipe/chat_template_families.h"
#include "recipe/python_compat.h"

namespace deepinfer {

namespace {

// A turn's text: the content trimmed, or, for content sent as parts, each part trimmed and the
// parts run together (the template loops over them).
std::string turn_text(const Message& message) {
  if (message.content_parts.empty()) return std::string(python_trim(content_or_empty(message)));
  std::string text;
  for (const std::string& part : message.content_parts) text.append(python_trim(part));
  return text;
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
  PromptBuilder b({"<bos>", "<start_of_turn>", "<end_of_turn>"});
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
    b.text(turn_text(message));
    b.fixed("<end_of_turn>\n");
  }
  if (options.add_generation_prompt) b.fixed("<start_of_turn>model\n");
  return std::move(b).finish();
}

}  // namespace deepinfer
