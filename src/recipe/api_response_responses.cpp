// OpenAI Responses: the response object (reasoning, message and function_call output items) and
// its stream (response.created ... response.completed, a sequence_number on every event).
#include "recipe/api_response_internal.h"

namespace deepinfer::api {
namespace {

class ResponsesBuilder : public BuilderBase {
 public:
  using BuilderBase::BuilderBase;

  std::vector<std::string> on_output(const RequestOutput& output) override {
    note_output(output);
    std::vector<std::string> frames;
    if (!started_) {
      started_ = true;
      frames.push_back(event("response.created", {{"response", response("in_progress")}}));
      frames.push_back(event("response.in_progress", {{"response", response("in_progress")}}));
    }
    for (const SampleOutput& sample : output.samples) {
      if (sample.index != 0) continue;  // Responses has no n
      for (const OutputEvent& e : absorb(sample)) on_event(e, frames);
    }
    return frames;
  }

  std::vector<std::string> finish_stream() override {
    std::vector<std::string> frames;
    close_item(frames);
    const std::string status = final_status();
    frames.push_back(event(status == "completed" ? "response.completed" : "response.incomplete",
                           {{"response", response(status)}}));
    return frames;
  }

  Json final_body() override {
    std::vector<std::string> ignored;
    close_item(ignored);
    return response(final_status());
  }

  std::string stream_error(const ApiError& error) override {
    return event("error", {{"code", error.type}, {"message", error.message},
                           {"param", error.param.empty() ? Json() : Json(error.param)}});
  }

 private:
  enum class Open { kNone, kReasoning, kMessage, kCall };

  std::string event(const std::string& type, Json fields) {
    Json e = {{"type", type}};
    for (auto& [k, v] : fields.items()) e[k] = std::move(v);
    e["sequence_number"] = sequence_number_++;
    return sse_event(type, e);
  }

  std::string final_status() const {
    return samples_[0].finish_reason == FinishReason::kLength ? "incomplete" : "completed";
  }

  Json response(const std::string& status) const {
    Json r = {{"id", id_}, {"object", "response"}, {"created_at", created_}, {"status", status},
              {"error", nullptr}, {"incomplete_details", nullptr}, {"instructions", nullptr},
              {"max_output_tokens", nullptr}, {"model", model_.served_name}, {"output", Json::array()},
              {"parallel_tool_calls", true}, {"previous_response_id", nullptr},
              {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}}, {"store", false}, {"temperature", 1.0},
              {"text", {{"format", {{"type", "text"}}}}}, {"tool_choice", "auto"}, {"tools", Json::array()},
              {"top_p", 1.0}, {"truncation", "disabled"}, {"usage", nullptr}, {"user", nullptr},
              {"metadata", Json::object()}};
    for (const auto& [k, v] : request_.echo_fields.items()) r[k] = v;
    if (status == "in_progress") return r;
    r["output"] = items_;
    if (status == "incomplete") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
    const int32_t output_tokens = num_completion_tokens();
    r["usage"] = {{"input_tokens", num_prompt_tokens_},
                  {"input_tokens_details", {{"cached_tokens", num_cached_tokens_}}},
                  {"output_tokens", output_tokens},
                  {"output_tokens_details", {{"reasoning_tokens", 0}}},
                  {"total_tokens", num_prompt_tokens_ + output_tokens}};
    add_speculative_usage(r["usage"]);
    add_warnings(r);
    return r;
  }

  Json position() const {
    return {{"item_id", item_["id"]}, {"output_index", items_.size()}};
  }

  void open_item(Open kind, Json item, std::vector<std::string>& frames) {
    open_ = kind;
    item_ = std::move(item);
    frames.push_back(event("response.output_item.added", {{"output_index", items_.size()}, {"item", item_}}));
    if (kind == Open::kCall) return;
    Json part = kind == Open::kMessage ? Json{{"type", "output_text"}, {"text", ""}, {"annotations", Json::array()},
                                              {"logprobs", Json::array()}}
                                       : Json{{"type", "reasoning_text"}, {"text", ""}};
    Json fields = position();
    fields["content_index"] = 0;
    fields["part"] = part;
    frames.push_back(event("response.content_part.added", fields));
  }

  void close_item(std::vector<std::string>& frames) {
    if (open_ == Open::kNone) return;
    Json fields = position();
    if (open_ == Open::kCall) {
      fields["arguments"] = item_["arguments"];
      frames.push_back(event("response.function_call_arguments.done", fields));
    } else {
      const bool message = open_ == Open::kMessage;
      const Json part = message ? Json{{"type", "output_text"}, {"text", text_}, {"annotations", Json::array()},
                                       {"logprobs", Json::array()}}
                                : Json{{"type", "reasoning_text"}, {"text", text_}};
      fields["content_index"] = 0;
      Json done = fields;
      done["text"] = text_;
      if (message) done["logprobs"] = Json::array();
      frames.push_back(event(message ? "response.output_text.done" : "response.reasoning_text.done", done));
      fields["part"] = part;
      frames.push_back(event("response.content_part.done", fields));
      item_["content"] = Json::array({part});
    }
    item_["status"] = "completed";
    frames.push_back(event("response.output_item.done", {{"output_index", items_.size()}, {"item", item_}}));
    items_.push_back(item_);
    open_ = Open::kNone;
    text_.clear();
  }

  std::string item_id(const char* prefix) const {
    return prefix + id_.substr(std::min(id_.find('_') + 1, id_.size())) + "_" + std::to_string(items_.size());
  }

  void on_event(const OutputEvent& e, std::vector<std::string>& frames) {
    switch (e.kind) {
      case OutputEventKind::kReasoning:
      case OutputEventKind::kText: {
        const bool message = e.kind == OutputEventKind::kText;
        const Open want = message ? Open::kMessage : Open::kReasoning;
        if (open_ != want) {
          close_item(frames);
          Json item = message ? Json{{"id", item_id("msg_")}, {"type", "message"}, {"status", "in_progress"},
                                     {"role", "assistant"}, {"content", Json::array()}}
                              : Json{{"id", item_id("rs_")}, {"type", "reasoning"}, {"summary", Json::array()},
                                     {"content", Json::array()}, {"status", "in_progress"}};
          open_item(want, std::move(item), frames);
        }
        text_ += e.text;
        Json fields = position();
        fields["content_index"] = 0;
        fields["delta"] = e.text;
        if (message) fields["logprobs"] = Json::array();
        frames.push_back(event(message ? "response.output_text.delta" : "response.reasoning_text.delta", fields));
        break;
      }
      case OutputEventKind::kToolCallBegin: {
        close_item(frames);
        const ToolCallState& call = samples_[0].tool_calls[static_cast<size_t>(e.tool_index)];
        open_item(Open::kCall,
                  {{"id", item_id("fc_")}, {"type", "function_call"}, {"status", "in_progress"},
                   {"call_id", call.id}, {"name", call.name}, {"arguments", ""}},
                  frames);
        break;
      }
      case OutputEventKind::kToolCallArguments: {
        item_["arguments"] = item_["arguments"].get<std::string>() + e.text;
        Json fields = position();
        fields["delta"] = e.text;
        frames.push_back(event("response.function_call_arguments.delta", fields));
        break;
      }
    }
  }

  bool started_ = false;
  int64_t sequence_number_ = 0;
  Open open_ = Open::kNone;
  Json item_;
  std::string text_;
  Json items_ = Json::array();
};

}  // namespace

std::unique_ptr<ApiResponseBuilder> make_responses_builder(const ApiRequest& request, const ModelContext& model,
                                                           std::string id, int64_t created) {
  return std::make_unique<ResponsesBuilder>(request, model, std::move(id), created);
}

}  // namespace deepinfer::api
