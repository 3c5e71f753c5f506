// Anthropic Messages: the message object (thinking, text and tool_use blocks) and its stream
// (message_start, content_block_start/delta/stop, message_delta, message_stop).
#include "recipe/api_response_internal.h"

#include "core/json_nesting.h"

namespace deepinfer::api {
namespace {

class MessagesBuilder : public BuilderBase {
 public:
  using BuilderBase::BuilderBase;

  std::vector<std::string> on_output(const RequestOutput& output) override {
    note_output(output);
    std::vector<std::string> frames;
    if (!started_) {
      started_ = true;
      Json message = message_object();
      message["content"] = Json::array();
      message["stop_reason"] = nullptr;
      message["stop_sequence"] = nullptr;
      message["usage"]["output_tokens"] = 0;
      frames.push_back(sse_event("message_start", {{"type", "message_start"}, {"message", message}}));
      frames.push_back(sse_event("ping", {{"type", "ping"}}));
    }
    for (const SampleOutput& sample : output.samples) {
      if (sample.index != 0) continue;  // Messages has no n
      for (const OutputEvent& e : absorb(sample)) on_event(e, frames);
    }
    return frames;
  }

  std::vector<std::string> finish_stream() override {
    std::vector<std::string> frames;
    close_block(frames);
    const auto [reason, sequence] = stop_reason();
    Json delta = {{"type", "message_delta"},
                  {"delta", {{"stop_reason", reason}, {"stop_sequence", sequence}}},
                  {"usage", usage_object()}};
    add_warnings(delta);
    frames.push_back(sse_event("message_delta", delta));
    frames.push_back(sse_event("message_stop", {{"type", "message_stop"}}));
    return frames;
  }

  Json final_body() override {
    std::vector<std::string> ignored;
    close_block(ignored);
    Json message = message_object();
    message["content"] = blocks_;
    const auto [reason, sequence] = stop_reason();
    message["stop_reason"] = reason;
    message["stop_sequence"] = sequence;
    add_warnings(message);
    return message;
  }

  std::string stream_error(const ApiError& error) override {
    return sse_event("error", {{"type", "error"}, {"error", {{"type", error.type}, {"message", error.message}}}});
  }

 private:
  enum class Open { kNone, kThinking, kText, kToolUse };

  Json usage_object() const {
    Json usage{{"input_tokens", num_prompt_tokens_ - num_cached_tokens_},
               {"cache_creation_input_tokens", 0},
               {"cache_read_input_tokens", num_cached_tokens_},
               {"output_tokens", num_completion_tokens()}};
    add_speculative_usage(usage);
    return usage;
  }

  Json message_object() const {
    return {{"id", id_}, {"type", "message"}, {"role", "assistant"}, {"model", model_.served_name},
            {"content", Json::array()}, {"stop_reason", nullptr}, {"stop_sequence", nullptr},
            {"usage", usage_object()}};
  }

  // end_turn | max_tokens | stop_sequence (with the sequence) | tool_use.
  std::pair<std::string, Json> stop_reason() const {
    const SampleState& s = samples_[0];
    if (s.finish_reason == FinishReason::kLength) return {"max_tokens", nullptr};
    if (!s.tool_calls.empty()) return {"tool_use", nullptr};
    for (const std::string& stop : request_.sampling.stop) {
      if (stop == s.stop_reason) return {"stop_sequence", stop};
    }
    return {"end_turn", nullptr};
  }

  void open_block(Open kind, Json block, std::vector<std::string>& frames) {
    open_ = kind;
    block_ = std::move(block);
    frames.push_back(sse_event("content_block_start",
                               {{"type", "content_block_start"}, {"index", blocks_.size()}, {"content_block", block_}}));
  }

  void delta(Json delta, std::vector<std::string>& frames) {
    frames.push_back(sse_event("content_block_delta",
                               {{"type", "content_block_delta"}, {"index", blocks_.size()}, {"delta", std::move(delta)}}));
  }

  void close_block(std::vector<std::string>& frames) {
    if (open_ == Open::kNone) return;
    if (open_ == Open::kThinking) {
      // No real signature exists; the response id stands in, as the DeepSeek recipe does.
      block_["signature"] = id_;
      delta({{"type", "signature_delta"}, {"signature", id_}}, frames);
    } else if (open_ == Open::kToolUse) {
      try {
        block_["input"] = json_nesting_depth(arguments_) > kMaxJsonNesting ? Json::object() : Json::parse(arguments_);
      } catch (const nlohmann::json::exception&) {
        block_["input"] = Json::object();  // cut off or invalid: the call still ends, with no input
      }
      if (!block_["input"].is_object()) block_["input"] = Json::object();
    }
    frames.push_back(sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", blocks_.size()}}));
    blocks_.push_back(block_);
    open_ = Open::kNone;
    arguments_.clear();
  }

  void on_event(const OutputEvent& e, std::vector<std::string>& frames) {
    switch (e.kind) {
      case OutputEventKind::kReasoning:
        if (open_ != Open::kThinking) {
          close_block(frames);
          open_block(Open::kThinking, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}, frames);
        }
        block_["thinking"] = block_["thinking"].get<std::string>() + e.text;
        delta({{"type", "thinking_delta"}, {"thinking", e.text}}, frames);
        break;
      case OutputEventKind::kText:
        if (open_ != Open::kText) {
          close_block(frames);
          open_block(Open::kText, {{"type", "text"}, {"text", ""}}, frames);
        }
        block_["text"] = block_["text"].get<std::string>() + e.text;
        delta({{"type", "text_delta"}, {"text", e.text}}, frames);
        break;
      case OutputEventKind::kToolCallBegin: {
        close_block(frames);
        const ToolCallState& call = samples_[0].tool_calls[static_cast<size_t>(e.tool_index)];
        open_block(Open::kToolUse, {{"type", "tool_use"}, {"id", call.id}, {"name", call.name}, {"input", Json::object()}},
                   frames);
        break;
      }
      case OutputEventKind::kToolCallArguments:
        arguments_ += e.text;
        delta({{"type", "input_json_delta"}, {"partial_json", e.text}}, frames);
        break;
    }
  }

  bool started_ = false;
  Open open_ = Open::kNone;
  Json block_;
  std::string arguments_;
  Json blocks_ = Json::array();
};

}  // namespace

std::unique_ptr<ApiResponseBuilder> make_messages_builder(const ApiRequest& request, const ModelContext& model,
                                                          std::string id, int64_t created) {
  return std::make_unique<MessagesBuilder>(request, model, std::move(id), created);
}

}  // namespace deepinfer::api
