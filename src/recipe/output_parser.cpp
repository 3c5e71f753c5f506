// The tag-based output parser (DeepSeek, Qwen3, Llama 3): <think> blocks, DeepSeek tool-call
// tokens, <tool_call> / bare JSON calls. GPT-OSS is in output_parser_harmony.cpp.
#include "recipe/output_parser.h"

#include "recipe/output_parser_util.h"

namespace deepinfer {
namespace {

using output_parser::CallPrefixMatch;
using output_parser::find_marker;

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kDsCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kDsCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kDsCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kDsCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kDsSep = "<｜tool▁sep｜>";
constexpr std::string_view kQwenCallOpen = "<tool_call>";
constexpr std::string_view kQwenCallClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

std::string trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \n\t\r");
  if (b == std::string_view::npos) return "";
  return std::string(s.substr(b, s.find_last_not_of(" \n\t\r") + 1 - b));
}

class TaggedParser : public OutputParser {
 public:
  TaggedParser(ChatFamily family, const OutputParsing& parsing) : family_(family), parsing_(parsing) {
    mode_ = parsing.starts_in_reasoning ? Mode::kReasoning : Mode::kContent;
    deepseek_ = family == ChatFamily::kDeepSeekV3 || family == ChatFamily::kDeepSeekR1 ||
                family == ChatFamily::kDeepSeekV31;
    llama_ = family == ChatFamily::kLlama31 || family == ChatFamily::kLlama32;
    reasoning_seen_ = parsing.starts_in_reasoning;
  }

  std::vector<OutputEvent> push(std::string_view text) override {
    pending_ += text;
    while (step(false)) {
    }
    return std::move(events_);
  }

  std::vector<OutputEvent> finish() override {
    while (step(true)) {
    }
    switch (mode_) {
      case Mode::kContent:
      case Mode::kReasoning:
        emit_plain(pending_);
        break;
      case Mode::kToolArgs:
        emit_args(pending_);
        break;
      case Mode::kJsonCall:
        body_ += pending_;
        end_json_call();
        break;
      default:
        break;
    }
    pending_.clear();
    return std::move(events_);
  }

  int32_t num_tool_calls() const override { return num_tool_calls_; }

 private:
  enum class Mode { kContent, kReasoning, kToolBlock, kToolHeader, kToolName, kToolArgs, kJsonCall };
  enum class JsonState { kPrefix, kArgs, kFallback };

  std::vector<std::string_view> call_start_markers() const {
    if (!parsing_.parse_tool_calls) return {};
    if (deepseek_) return {kDsCallsBegin, kDsCallBegin};
    if (family_ == ChatFamily::kQwen3 || family_ == ChatFamily::kQwen3Vl) return {kQwenCallOpen};
    if (llama_) return {kPythonTag};
    return {};
  }

  void emit_plain(std::string_view text) {
    if (leading_) {
      const size_t b = text.find_first_not_of('\n');
      if (b == std::string_view::npos) return;
      text.remove_prefix(b);
      leading_ = false;
    }
    if (text.empty()) return;
    if (mode_ == Mode::kContent) content_started_ = true;
    append_event(events_, OutputEvent{mode_ == Mode::kReasoning ? OutputEventKind::kReasoning : OutputEventKind::kText,
                                      std::string(text), "", 0});
  }

  void emit_args(std::string_view text) {
    append_event(events_, OutputEvent{OutputEventKind::kToolCallArguments, std::string(text), "", num_tool_calls_ - 1});
  }

  void begin_call(std::string name) {
    events_.push_back(OutputEvent{OutputEventKind::kToolCallBegin, "", std::move(name), num_tool_calls_});
    ++num_tool_calls_;
  }

  // Consumes what it can; false when it must wait for more text (or, at the end, is done).
  bool step(bool at_end) {
    switch (mode_) {
      case Mode::kContent:
      case Mode::kReasoning:
        return step_plain(at_end);
      case Mode::kToolBlock:
        return step_markers({kDsCallBegin, kDsCallsEnd}, [&](size_t marker) {
          mode_ = marker == 0 ? Mode::kToolHeader : Mode::kContent;
          leading_ = true;
        });
      case Mode::kToolHeader:
      case Mode::kToolName:
        return step_deepseek_name();
      case Mode::kToolArgs:
        return step_deepseek_args();
      case Mode::kJsonCall:
        return step_json_call();
    }
    return false;
  }

  bool step_plain(bool at_end) {
    if (llama_ && parsing_.parse_tool_calls && mode_ == Mode::kContent && !content_started_ && !llama_checked_) {
      const size_t b = pending_.find_first_not_of(" \n\t\r");
      if (b == std::string::npos) return false;
      llama_checked_ = true;
      if (pending_[b] == '{') {
        pending_.erase(0, b);
        open_json_call("", "");
        return true;
      }
    }
    std::vector<std::string_view> markers = call_start_markers();
    if (parsing_.parse_reasoning) {
      markers.push_back(kThinkClose);
      if (mode_ == Mode::kContent && !content_started_ && !reasoning_seen_) markers.push_back(kThinkOpen);
    }
    size_t safe = 0;
    const auto hit = find_marker(pending_, markers, /*hold_newlines=*/true, &safe);
    if (!hit) {
      if (at_end) return false;
      emit_plain(std::string_view(pending_).substr(0, safe));
      pending_.erase(0, safe);
      return false;
    }
    const std::string_view marker = markers[hit->marker];
    emit_plain(std::string_view(pending_).substr(0, hit->begin));
    pending_.erase(0, hit->end);
    if (marker == kThinkOpen) {
      mode_ = Mode::kReasoning;
      reasoning_seen_ = true;
      leading_ = true;
    } else if (marker == kThinkClose) {
      // A </think> in the answer is a stray marker: dropped.
      if (mode_ == Mode::kReasoning) leading_ = true;
      mode_ = Mode::kContent;
    } else if (marker == kDsCallsBegin) {
      mode_ = Mode::kToolBlock;
    } else if (marker == kDsCallBegin) {
      mode_ = Mode::kToolHeader;
    } else if (marker == kQwenCallOpen) {
      open_json_call(kQwenCallOpen, kQwenCallClose);
    } else if (marker == kPythonTag) {
      open_json_call(kPythonTag, "");
    }
    return true;
  }

  template <typename OnHit>
  bool step_markers(const std::vector<std::string_view>& markers, OnHit on_hit) {
    size_t safe = 0;
    const auto hit = find_marker(pending_, markers, false, &safe);
    if (!hit) {
      pending_.erase(0, safe);
      return false;
    }
    pending_.erase(0, hit->end);
    on_hit(hit->marker);
    return true;
  }

  // V3.1: <call_begin>NAME<sep>ARGS<call_end>; V3/R1: <call_begin>function<sep>NAME\n```json\nARGS\n```<call_end>.
  bool step_deepseek_name() {
    const bool v31 = family_ == ChatFamily::kDeepSeekV31;
    const std::vector<std::string_view> markers =
        mode_ == Mode::kToolHeader ? std::vector<std::string_view>{kDsSep}
                                   : std::vector<std::string_view>{"\n```json\n", "\n```\n"};
    size_t safe = 0;
    const auto hit = find_marker(pending_, markers, false, &safe);
    if (!hit) return false;
    const std::string name = trim(std::string_view(pending_).substr(0, hit->begin));
    pending_.erase(0, hit->end);
    if (mode_ == Mode::kToolHeader && !v31) {
      mode_ = Mode::kToolName;
      return true;
    }
    begin_call(name);
    mode_ = Mode::kToolArgs;
    return true;
  }

  bool step_deepseek_args() {
    // V3's json block closes with a fence right before the call end; a fence elsewhere is
    // part of the arguments.
    static const std::string kFenceEnd = "\n```" + std::string(kDsCallEnd);
    static const std::string kFenceEndNoNewline = "```" + std::string(kDsCallEnd);
    const std::vector<std::string_view> ends = {kFenceEnd, kFenceEndNoNewline, kDsCallEnd, kDsCallsEnd};
    size_t safe = 0;
    const auto hit = find_marker(pending_, ends, false, &safe);
    if (!hit) {
      emit_args(std::string_view(pending_).substr(0, safe));
      pending_.erase(0, safe);
      return false;
    }
    emit_args(std::string_view(pending_).substr(0, hit->begin));
    pending_.erase(0, hit->end);
    mode_ = hit->marker == 3 ? Mode::kContent : Mode::kToolBlock;
    leading_ = true;
    return true;
  }

  void open_json_call(std::string_view open, std::string_view close) {
    mode_ = Mode::kJsonCall;
    json_state_ = JsonState::kPrefix;
    json_open_ = open;
    json_close_ = close;
    body_.clear();
    scanner_ = output_parser::JsonValueScanner();
  }

  bool step_json_call() {
    std::string_view available = pending_;
    std::optional<output_parser::MarkerHit> hit;
    if (!json_close_.empty()) {
      size_t safe = 0;
      hit = find_marker(pending_, {json_close_}, false, &safe);
      available = std::string_view(pending_).substr(0, hit ? hit->begin : safe);
    }
    take_json_body(available);
    pending_.erase(0, available.size());
    if (!hit) return false;
    pending_.erase(0, hit->end - hit->begin);
    end_json_call();
    return true;
  }

  void take_json_body(std::string_view text) {
    if (json_state_ == JsonState::kArgs) {
      if (!scanner_.done()) emit_args(scanner_.feed(text));
      return;
    }
    body_ += text;
    if (json_state_ != JsonState::kPrefix) return;
    const output_parser::CallPrefix prefix = output_parser::match_call_prefix(body_);
    if (prefix.match == CallPrefixMatch::kMismatch) json_state_ = JsonState::kFallback;
    if (prefix.match != CallPrefixMatch::kMatched) return;
    json_state_ = JsonState::kArgs;
    begin_call(prefix.name);
    emit_args(scanner_.feed(std::string_view(body_).substr(prefix.consumed)));
  }

  // The call's end (its close tag, or the end of the output for bare JSON calls).
  void end_json_call() {
    if (json_state_ != JsonState::kArgs) {
      if (const auto whole = output_parser::parse_whole_call(body_)) {
        begin_call(whole->name);
        emit_args(whole->arguments);
      } else {
        // Not a call after all: the model's text, markers included, is the answer.
        mode_ = Mode::kContent;
        emit_plain(json_open_ + body_ + json_close_);
      }
    }
    mode_ = Mode::kContent;
    leading_ = true;
    body_.clear();
  }

  ChatFamily family_;
  OutputParsing parsing_;
  bool deepseek_ = false;
  bool llama_ = false;
  Mode mode_ = Mode::kContent;
  std::string pending_;
  std::vector<OutputEvent> events_;
  bool leading_ = true;
  bool content_started_ = false;
  bool reasoning_seen_ = false;
  bool llama_checked_ = false;
  int32_t num_tool_calls_ = 0;
  JsonState json_state_ = JsonState::kPrefix;
  std::string json_open_;
  std::string json_close_;
  std::string body_;
  output_parser::JsonValueScanner scanner_;
};

}  // namespace

void append_event(std::vector<OutputEvent>& events, OutputEvent event) {
  if (event.kind != OutputEventKind::kToolCallBegin && event.text.empty()) return;
  if (!events.empty() && event.kind != OutputEventKind::kToolCallBegin && events.back().kind == event.kind &&
      events.back().tool_index == event.tool_index) {
    events.back().text += event.text;
    return;
  }
  events.push_back(std::move(event));
}

std::unique_ptr<OutputParser> OutputParser::create(ChatFamily family, const OutputParsing& parsing) {
  if (family == ChatFamily::kGptOss) return output_parser::make_harmony_parser(parsing);
  return std::make_unique<TaggedParser>(family, parsing);
}

}  // namespace deepinfer
