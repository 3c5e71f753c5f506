// Tool calls constrained in each chat family's own markup: the structural grammar (see
// grammar/structural.h) whose outputs the family's output parser reads as well-formed calls of
// the offered tools, with arguments that match each tool's schema.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "recipe/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {

struct ToolCallGrammarInput {
  ChatFamily family = ChatFamily::kQwen3;
  // Markers that are one added token of this tokenizer are that token in the grammar; others are
  // spelled as text.
  const Tokenizer* tokenizer = nullptr;
  // The arguments grammar of each offered tool, in order: {"json_schema": ..., "lenient": ...} or
  // {"json_object": true}; names[i] is tool i's name.
  std::vector<std::string> names;
  std::vector<nlohmann::ordered_json> arguments;
  // true: exactly one call (tool_choice "required" or a named tool); false (auto): free text, then
  // at most one call.
  bool required = true;
  bool reasoning_open = false;  // the prompt opened the reasoning block (R1, V3.1 thinking)
  bool may_reason = false;      // the model may open one itself first (Qwen3 thinking, GPT-OSS)
};

// The structural grammar spec; nullopt for a family without a tool-call format (Llama 3 base).
std::optional<nlohmann::ordered_json> tool_call_grammar(const ToolCallGrammarInput& input);

}  // namespace deepinfer
