// OpenAI Chat Completions (chat.completion / chat.completion.chunk) and Completions
// (text_completion) responses and SSE streams.
#include "recipe/api_response_internal.h"

namespace deepinfer::api {
namespace {

class ChatBuilder : public BuilderBase {
 public:
  using BuilderBase::BuilderBase;

  std::vector<std::string> on_output(const RequestOutput& output) override {
    note_output(output);
    std::vector<std::string> frames;
    for (const SampleOutput& sample : output.samples) {
      SampleState& s = samples_[static_cast<size_t>(sample.index)];
      if (!s.started) {
        s.started = true;
        Json delta = {{"role", "assistant"}, {"content", ""}};
        if (request_.thinking) delta = {{"role", "assistant"}, {"content", nullptr}, {"reasoning_content", ""}};
        frames.push_back(chunk(sample.index, delta, nullptr, nullptr));
      }
      const size_t first_logprob = s.logprobs.size();
      const std::vector<OutputEvent> events = absorb(sample);
      Json logprobs = nullptr;
      if (request_.logprobs && s.logprobs.size() > first_logprob) {
        logprobs = {{"content", logprob_content(s, first_logprob)}};
      }
      for (const OutputEvent& e : events) {
        frames.push_back(chunk(sample.index, delta_of(s, e), std::exchange(logprobs, nullptr), nullptr));
      }
      if (!logprobs.is_null()) frames.push_back(chunk(sample.index, {{"content", ""}}, logprobs, nullptr));
      if (sample.finished) frames.push_back(chunk(sample.index, Json::object(), nullptr, openai_finish_reason(s)));
    }
    return frames;
  }

  std::vector<std::string> finish_stream() override { return openai_stream_end(header()); }

  Json final_body() override {
    Json body = header();
    body["object"] = "chat.completion";
    Json choices = Json::array();
    for (size_t i = 0; i < samples_.size(); ++i) {
      const SampleState& s = samples_[i];
      Json message = {{"role", "assistant"}, {"content", s.text}};
      if (s.text.empty() && !s.tool_calls.empty()) message["content"] = nullptr;
      if (request_.thinking || !s.reasoning.empty()) message["reasoning_content"] = s.reasoning;
      if (!s.tool_calls.empty()) {
        Json calls = Json::array();
        for (const ToolCallState& c : s.tool_calls) {
          calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
        }
        message["tool_calls"] = std::move(calls);
      }
      Json logprobs = nullptr;
      if (request_.logprobs) logprobs = {{"content", logprob_content(s, 0)}};
      choices.push_back({{"index", i}, {"message", std::move(message)}, {"logprobs", std::move(logprobs)},
                         {"finish_reason", openai_finish_reason(s)}});
    }
    body["choices"] = std::move(choices);
    body["usage"] = usage_openai();
    add_warnings(body);
    return body;
  }

  std::string stream_error(const ApiError& error) override { return "data: " + error_body(request_.kind, error) + "\n\n"; }

 private:
  Json header() const { return openai_header("chat.completion.chunk"); }

  std::string chunk(int32_t index, Json delta, Json logprobs, Json finish_reason) const {
    Json c = header();
    c["choices"] = Json::array({Json{{"index", index}, {"delta", std::move(delta)}, {"logprobs", std::move(logprobs)},
                                     {"finish_reason", std::move(finish_reason)}}});
    if (request_.include_usage) c["usage"] = nullptr;
    return sse_data(c);
  }

  Json delta_of(const SampleState& s, const OutputEvent& e) const {
    switch (e.kind) {
      case OutputEventKind::kText:
        return {{"content", e.text}};
      case OutputEventKind::kReasoning:
        return {{"reasoning_content", e.text}};
      case OutputEventKind::kToolCallBegin: {
        const ToolCallState& c = s.tool_calls[static_cast<size_t>(e.tool_index)];
        return {{"tool_calls", Json::array({Json{{"index", e.tool_index}, {"id", c.id}, {"type", "function"},
                                                 {"function", {{"name", c.name}, {"arguments", ""}}}}})}};
      }
      case OutputEventKind::kToolCallArguments:
        return {{"tool_calls", Json::array({Json{{"index", e.tool_index}, {"function", {{"arguments", e.text}}}}})}};
    }
    return Json::object();
  }

  Json logprob_content(const SampleState& s, size_t from) const {
    Json content = Json::array();
    for (size_t i = from; i < s.logprobs.size(); ++i) {
      const TokenLogprob& lp = s.logprobs[i];
      const std::string text = token_text(lp.token_id);
      Json top = Json::array();
      for (size_t k = 0; k < lp.top.size() && static_cast<int32_t>(k) < request_.top_logprobs; ++k) {
        const std::string t = token_text(lp.top[k].first);
        top.push_back({{"token", t}, {"logprob", lp.top[k].second}, {"bytes", token_bytes(lp.top[k].first)}});
      }
      content.push_back({{"token", text}, {"logprob", lp.logprob}, {"bytes", token_bytes(lp.token_id)}, {"top_logprobs", top}});
    }
    return content;
  }
};

class CompletionsBuilder : public BuilderBase {
 public:
  using BuilderBase::BuilderBase;

  std::vector<std::string> on_output(const RequestOutput& output) override {
    note_output(output);
    if (output.prompt_logprobs) prompt_logprobs_ = *output.prompt_logprobs;
    std::vector<std::string> frames;
    for (const SampleOutput& sample : output.samples) {
      SampleState& s = samples_[static_cast<size_t>(sample.index)];
      std::string text;
      Json logprobs = Json{{"tokens", Json::array()}, {"token_logprobs", Json::array()},
                           {"top_logprobs", Json::array()}, {"text_offset", Json::array()}};
      if (!s.started) {
        s.started = true;
        if (request_.echo) {
          text = request_.prompt_text;
          add_prompt_logprobs(logprobs, offsets_[static_cast<size_t>(sample.index)]);
        }
      }
      const size_t first_logprob = s.logprobs.size();
      for (const OutputEvent& e : absorb(sample)) text += e.text;
      add_logprobs(s, first_logprob, logprobs, offsets_[static_cast<size_t>(sample.index)]);
      frames.push_back(chunk(sample.index, text, request_.logprobs ? logprobs : Json(nullptr),
                             sample.finished ? Json(openai_finish_reason(s)) : Json(nullptr)));
    }
    return frames;
  }

  std::vector<std::string> finish_stream() override { return openai_stream_end(header()); }

  Json final_body() override {
    Json body = header();
    Json choices = Json::array();
    for (size_t i = 0; i < samples_.size(); ++i) {
      const SampleState& s = samples_[i];
      Json logprobs = nullptr;
      if (request_.logprobs) {
        logprobs = Json{{"tokens", Json::array()}, {"token_logprobs", Json::array()}, {"top_logprobs", Json::array()},
                        {"text_offset", Json::array()}};
        int64_t offset = 0;
        if (request_.echo) add_prompt_logprobs(logprobs, offset);
        add_logprobs(s, 0, logprobs, offset);
      }
      choices.push_back({{"index", i}, {"text", (request_.echo ? request_.prompt_text : "") + s.text},
                         {"logprobs", std::move(logprobs)}, {"finish_reason", openai_finish_reason(s)}});
    }
    body["choices"] = std::move(choices);
    body["usage"] = usage_openai();
    add_warnings(body);
    return body;
  }

  std::string stream_error(const ApiError& error) override { return "data: " + error_body(request_.kind, error) + "\n\n"; }

 private:
  Json header() const { return openai_header("text_completion"); }

  std::string chunk(int32_t index, const std::string& text, Json logprobs, Json finish_reason) const {
    Json c = header();
    c["choices"] = Json::array({Json{{"index", index}, {"text", text}, {"logprobs", std::move(logprobs)},
                                     {"finish_reason", std::move(finish_reason)}}});
    if (request_.include_usage) c["usage"] = nullptr;
    return sse_data(c);
  }

  // offset: the entry's position in the choice's text (prompt included when echoed); advanced.
  void add_entry(Json& logprobs, int32_t token_id, Json logprob, const std::vector<std::pair<int32_t, double>>* top,
                 int64_t& offset) const {
    const std::string text = token_text(token_id);
    logprobs["tokens"].push_back(text);
    logprobs["token_logprobs"].push_back(std::move(logprob));
    Json top_map = nullptr;
    if (top != nullptr) {
      top_map = Json::object();
      for (size_t k = 0; k < top->size() && static_cast<int32_t>(k) < request_.top_logprobs; ++k) {
        top_map[token_text((*top)[k].first)] = (*top)[k].second;
      }
    }
    logprobs["top_logprobs"].push_back(std::move(top_map));
    logprobs["text_offset"].push_back(offset);
    offset += static_cast<int64_t>(text.size());
  }

  void add_prompt_logprobs(Json& logprobs, int64_t& offset) const {
    for (size_t i = 0; i < request_.prompt_token_ids.size(); ++i) {
      const auto& lp = i < prompt_logprobs_.size() ? prompt_logprobs_[i] : std::nullopt;
      add_entry(logprobs, request_.prompt_token_ids[i], lp ? Json(lp->logprob) : Json(nullptr), lp ? &lp->top : nullptr, offset);
    }
  }

  void add_logprobs(const SampleState& s, size_t from, Json& logprobs, int64_t& offset) const {
    for (size_t i = from; i < s.logprobs.size(); ++i) {
      add_entry(logprobs, s.logprobs[i].token_id, s.logprobs[i].logprob, &s.logprobs[i].top, offset);
    }
  }

  std::vector<std::optional<TokenLogprob>> prompt_logprobs_;
  std::vector<int64_t> offsets_ = std::vector<int64_t>(samples_.size(), 0);  // per choice, streaming
};

}  // namespace

std::unique_ptr<ApiResponseBuilder> make_chat_builder(const ApiRequest& request, const ModelContext& model,
                                                      std::string id, int64_t created) {
  return std::make_unique<ChatBuilder>(request, model, std::move(id), created);
}

std::unique_ptr<ApiResponseBuilder> make_completions_builder(const ApiRequest& request, const ModelContext& model,
                                                             std::string id, int64_t created) {
  return std::make_unique<CompletionsBuilder>(request, model, std::move(id), created);
}

}  // namespace deepinfer::api
