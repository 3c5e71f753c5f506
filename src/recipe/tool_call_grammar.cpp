// Per-family tool-call grammars. Each follows what the family's chat template renders for a call
// and what output_parser*.cpp reads back; free text excludes every marker the parser reacts to,
// so text can never open a call the grammar did not shape.
#include "recipe/tool_call_grammar.h"

#include <string>

namespace deepinfer {
namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kThinkOpen = "<think>";
constexpr const char* kThinkClose = "</think>";
constexpr const char* kDsCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr const char* kDsCallsEnd = "<｜tool▁calls▁end｜>";
constexpr const char* kDsCallBegin = "<｜tool▁call▁begin｜>";
constexpr const char* kDsCallEnd = "<｜tool▁call▁end｜>";
constexpr const char* kDsSep = "<｜tool▁sep｜>";
constexpr const char* kQwenCallOpen = "<tool_call>";
constexpr const char* kQwenCallClose = "</tool_call>";
constexpr const char* kPythonTag = "<|python_tag|>";

Json seq(Json items) { return Json{{"seq", std::move(items)}}; }
Json any(Json items) { return Json{{"any", std::move(items)}}; }
Json optional(Json node) { return Json{{"optional", std::move(node)}}; }
Json text_without(const std::vector<std::string>& markers, const std::string& not_first = "") {
  Json node = {{"text_without", markers}};
  if (!not_first.empty()) node["not_first"] = not_first;
  return node;
}

class Builder {
 public:
  explicit Builder(const ToolCallGrammarInput& input) : in_(input) {}

  // The marker as its single added token when the tokenizer has one, else as text.
  Json mark(const std::string& text) const {
    if (in_.tokenizer != nullptr) {
      if (const auto id = in_.tokenizer->find_added_token(text)) return Json{{"token", *id}};
    }
    return text;
  }

  // One of the tools, each through make_call(name, arguments grammar).
  template <typename MakeCall>
  Json calls(MakeCall make_call) const {
    Json alternatives = Json::array();
    for (size_t i = 0; i < in_.names.size(); ++i) alternatives.push_back(make_call(in_.names[i], in_.arguments[i]));
    return any(std::move(alternatives));
  }

  // <think> ... </think> before the answer: closed only when the prompt opened it, optional when
  // the model may open it. Reasoning text excludes the call openers too, which the parser reads
  // inside reasoning as well.
  Json reasoning(const std::vector<std::string>& call_openers) const {
    std::vector<std::string> markers = call_openers;
    markers.push_back(kThinkClose);
    Json close = seq({text_without(markers), mark(kThinkClose), any({"", "\n", "\n\n"})});
    if (in_.reasoning_open) return close;
    if (in_.may_reason) return optional(seq({mark(kThinkOpen), close}));
    return "";
  }

  // The tagged families: [reasoning] then the call block (required) or free text and an
  // optional call block (auto).
  Json tagged(const Json& block, const std::vector<std::string>& call_openers, bool parses_reasoning) const {
    Json head = reasoning(call_openers);
    if (in_.required) return seq({head, block});
    std::vector<std::string> markers = call_openers;
    if (parses_reasoning) {
      markers.push_back(kThinkOpen);
      markers.push_back(kThinkClose);
    }
    return seq({head, text_without(markers), optional(block)});
  }

  Json deepseek() const {
    const bool v31 = in_.family == ChatFamily::kDeepSeekV31;
    const bool v3 = in_.family == ChatFamily::kDeepSeekV3;
    Json block = seq({mark(kDsCallsBegin), calls([&](const std::string& name, const Json& args) {
                        // V3/R1: type, name, arguments in a ```json block; V3.1: name, arguments.
                        if (v31) return seq({mark(kDsCallBegin), name, mark(kDsSep), args, mark(kDsCallEnd)});
                        return seq({mark(kDsCallBegin), "function", mark(kDsSep), name + "\n```json\n", args, "\n```",
                                    mark(kDsCallEnd)});
                      }),
                      // V3's template closes the block only after a second call.
                      v3 ? optional(mark(kDsCallsEnd)) : mark(kDsCallsEnd)});
    return tagged(block, {kDsCallsBegin, kDsCallBegin}, !v3);
  }

  Json qwen3() const {
    Json block = calls([&](const std::string& name, const Json& args) {
      return seq({mark(kQwenCallOpen), "\n{\"name\": " + Json(name).dump() + ", \"arguments\": ", args, "}\n",
                  mark(kQwenCallClose)});
    });
    return tagged(seq({any({"", "\n", "\n\n"}), block}), {kQwenCallOpen}, true);
  }

  // Llama 3.1: the bare JSON call the template renders, or text then <|python_tag|> and the
  // call. The parser takes a '{' as the first character as a call, so text starts otherwise.
  Json llama() const {
    Json call = calls([&](const std::string& name, const Json& args) {
      return seq({"{\"name\": " + Json(name).dump() + ", \"parameters\": ", args, "}"});
    });
    if (in_.required) return call;
    return any({call, seq({text_without({kPythonTag}, " \t\r\n{"), optional(seq({mark(kPythonTag), call}))})});
  }

  // GPT-OSS harmony after the prompt's "<|start|>assistant": an optional analysis message, then
  // a commentary call (as the model writes it, or as the template renders it) or, in auto, a
  // final message.
  Json gpt_oss() const {
    const std::vector<std::string> ends = {"<|end|>", "<|call|>", "<|return|>", "<|start|>"};
    Json analysis = seq({mark("<|channel|>"), "analysis", mark("<|message|>"), text_without(ends), mark("<|end|>"),
                         mark("<|start|>"), "assistant"});
    Json constrain = seq({" ", mark("<|constrain|>"), "json"});
    Json call = calls([&](const std::string& name, const Json& args) {
      return any({seq({mark("<|channel|>"), "commentary to=functions." + name, optional(constrain), mark("<|message|>"),
                       args}),
                  seq({" to=functions." + name, mark("<|channel|>"), "commentary", any({"", " json", constrain}),
                       mark("<|message|>"), args})});
    });
    if (in_.required) return seq({optional(analysis), call});
    Json final_message = seq({mark("<|channel|>"), "final", mark("<|message|>"), text_without(ends)});
    return seq({optional(analysis), any({call, final_message})});
  }

 private:
  const ToolCallGrammarInput& in_;
};

}  // namespace

std::optional<Json> tool_call_grammar(const ToolCallGrammarInput& input) {
  const Builder b(input);
  switch (input.family) {
    case ChatFamily::kDeepSeekV3:
    case ChatFamily::kDeepSeekR1:
    case ChatFamily::kDeepSeekV31:
      return b.deepseek();
    case ChatFamily::kQwen3:
    case ChatFamily::kQwen3Vl:
      return b.qwen3();
    case ChatFamily::kLlama31:
    case ChatFamily::kLlama32:
      return b.llama();
    case ChatFamily::kGptOss:
      return b.gpt_oss();
    case ChatFamily::kLlama3:
    case ChatFamily::kGemma3:
    case ChatFamily::kQwen2Vl:
      break;
  }
  return std::nullopt;
}

}  // namespace deepinfer
