// GPT-OSS harmony output: a sequence of messages "<header><|message|><body><|end|>" after the
// prompt's "<|start|>assistant". analysis bodies are reasoning, final bodies the answer, and a
// commentary body addressed "to=functions.NAME" is a call's JSON arguments (it ends at <|call|>,
// an end-of-sequence token the engine leaves out of the text).
#include "recipe/output_parser_util.h"

namespace deepinfer::output_parser {
namespace {

constexpr std::string_view kMessage = "<|message|>";
constexpr std::string_view kStart = "<|start|>";
constexpr std::string_view kChannel = "<|channel|>";

// The word after key in header, up to a space or the next "<|".
std::string header_word(std::string_view header, std::string_view key) {
  const size_t pos = header.find(key);
  if (pos == std::string_view::npos) return "";
  std::string_view rest = header.substr(pos + key.size());
  const size_t end = std::min(rest.find(' '), rest.find("<|"));
  return std::string(rest.substr(0, end));
}

class HarmonyParser : public OutputParser {
 public:
  explicit HarmonyParser(const OutputParsing& parsing) : parsing_(parsing) {}

  std::vector<OutputEvent> push(std::string_view text) override {
    pending_ += text;
    while (step()) {
    }
    return std::move(events_);
  }

  std::vector<OutputEvent> finish() override {
    while (step()) {
    }
    if (mode_ == Mode::kBody) emit_body(pending_);
    pending_.clear();
    return std::move(events_);
  }

  int32_t num_tool_calls() const override { return num_tool_calls_; }

 private:
  enum class Mode { kHeader, kBody, kBetween };
  enum class Body { kReasoning, kText, kCall };

  bool step() {
    size_t safe = 0;
    if (mode_ == Mode::kHeader) {
      const auto hit = find_marker(pending_, {kMessage}, false, &safe);
      if (!hit) return false;
      open_body(std::string_view(pending_).substr(0, hit->begin));
      pending_.erase(0, hit->end);
      return true;
    }
    if (mode_ == Mode::kBetween) {
      const auto hit = find_marker(pending_, {kStart}, false, &safe);
      if (!hit) {
        pending_.erase(0, safe);
        return false;
      }
      pending_.erase(0, hit->end);
      mode_ = Mode::kHeader;
      return true;
    }
    static const std::vector<std::string_view> kEnds = {"<|end|>", "<|call|>", "<|return|>", kStart};
    const auto hit = find_marker(pending_, kEnds, false, &safe);
    if (!hit) {
      emit_body(std::string_view(pending_).substr(0, safe));
      pending_.erase(0, safe);
      return false;
    }
    emit_body(std::string_view(pending_).substr(0, hit->begin));
    pending_.erase(0, hit->end);
    mode_ = hit->marker == 3 ? Mode::kHeader : Mode::kBetween;
    return true;
  }

  void open_body(std::string_view header) {
    mode_ = Mode::kBody;
    const std::string channel = header_word(header, kChannel);
    const std::string recipient = header_word(header, "to=");
    if (channel == "analysis") {
      body_ = Body::kReasoning;
    } else if (parsing_.parse_tool_calls && recipient.starts_with("functions.")) {
      body_ = Body::kCall;
      events_.push_back(OutputEvent{OutputEventKind::kToolCallBegin, "", recipient.substr(10), num_tool_calls_});
      ++num_tool_calls_;
    } else {
      body_ = Body::kText;
    }
  }

  void emit_body(std::string_view text) {
    OutputEvent event;
    event.text = std::string(text);
    if (body_ == Body::kReasoning) {
      event.kind = OutputEventKind::kReasoning;
    } else if (body_ == Body::kText) {
      event.kind = OutputEventKind::kText;
    } else {
      event.kind = OutputEventKind::kToolCallArguments;
      event.tool_index = num_tool_calls_ - 1;
    }
    append_event(events_, std::move(event));
  }

  OutputParsing parsing_;
  Mode mode_ = Mode::kHeader;
  Body body_ = Body::kText;
  std::string pending_;
  std::vector<OutputEvent> events_;
  int32_t num_tool_calls_ = 0;
};

}  // namespace

std::unique_ptr<OutputParser> make_harmony_parser(const OutputParsing& parsing) {
  return std::make_unique<HarmonyParser>(parsing);
}

}  // namespace deepinfer::output_parser
