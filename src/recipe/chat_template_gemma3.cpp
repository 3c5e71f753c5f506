// Gemma 3 prompts (google/gemma-3-*-it): <start_of_turn>role / <end_of_turn> turns, the assistant
// called "model", a leading system message folded into the first turn, no tools and no thinking.
#include <string>
#include <string_view>

#include "recipe/chat_template_families.h"
#include "recipe/python_compat.h"

namespace deepinfer {

// Kept quirks: the system text is not trimmed (each turn's content is), a later system message is
// a turn of role "system", tool results are turns of role "tool", and tool calls are dropped.
RenderResult render_gemma3(const Conversation& conversation, const ChatOptions& options) {
  const std::vector<Message>& messages = conversation.messages;
  std::string first_user_prefix;
  size_t first = 0;
  if (messages[0].role == Role::kSystem) {
    first_user_prefix = content_or_empty(messages[0]);
    first_user_prefix.append("\n\n");
    first = 1;
  }
  PromptBuilder b({"<bos>", "<start_of_turn>", "<end_of_turn>"});
  b.fixed("<bos>");
  for (size_t i = first; i < messages.size(); ++i) {
    const Message& message = messages[i];
    if ((message.role == Role::kUser) != ((i - first) % 2 == 0)) {
      return Error{"Conversation roles must alternate user/assistant/user/assistant/..."};
    }
    b.fixed("<start_of_turn>");
    b.fixed(message.role == Role::kAssistant ? "model" : role_name(message.role));
    b.fixed("\n");
    if (i == first) b.text(first_user_prefix);
    b.text(python_trim(content_or_empty(message)));
    b.fixed("<end_of_turn>\n");
  }
  if (options.add_generation_prompt) b.fixed("<start_of_turn>model\n");
  return std::move(b).finish();
}

}  // namespace deepinfer
