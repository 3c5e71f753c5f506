// Streaming split of a model's generated text into reasoning, visible text and tool calls, per
// chat family: <think> blocks (DeepSeek-R1/V3.1, Qwen3), DeepSeek tool-call tokens, Qwen3
// <tool_call> JSON, Llama 3.1 JSON calls, GPT-OSS harmony channels. Markers split across pushes
// are held back until they are complete or ruled out.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "recipe/api.h"
#include "recipe/chat_template.h"

namespace deepinfer {

enum class OutputEventKind {
  kText,              // visible answer text
  kReasoning,         // reasoning text
  kToolCallBegin,     // a new tool call: tool_index, name
  kToolCallArguments, // a piece of the current call's arguments JSON: tool_index, text
};

struct OutputEvent {
  OutputEventKind kind = OutputEventKind::kText;
  std::string text;        // kText, kReasoning, kToolCallArguments
  std::string name;        // kToolCallBegin
  int32_t tool_index = 0;  // kToolCallBegin, kToolCallArguments: 0, 1, ... in order
};

// One sample's parser. Not thread-safe. Adjacent events of the same kind may be merged by the
// caller; the concatenation of all argument pieces of a call is the call's arguments text.
class OutputParser {
 public:
  static std::unique_ptr<OutputParser> create(ChatFamily family, const OutputParsing& parsing);
  virtual ~OutputParser() = default;

  // The next piece of generated text (any split, whole UTF-8 characters).
  virtual std::vector<OutputEvent> push(std::string_view text) = 0;
  // The end of the output: releases what was held back (an unfinished marker is text).
  virtual std::vector<OutputEvent> finish() = 0;
  // Tool calls begun so far.
  virtual int32_t num_tool_calls() const = 0;
};

// Appends an event, merging it into the last one when both are text of the same kind (and the
// same call, for arguments). Empty text is dropped.
void append_event(std::vector<OutputEvent>& events, OutputEvent event);

}  // namespace deepinfer
