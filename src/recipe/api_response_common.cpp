// Response-builder bookkeeping shared by every API, and the factory.
#include <algorithm>

#include "core/check.h"

#include "recipe/api_response_internal.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace api {

std::string dump_json(const Json& value) { return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

std::string sse_data(const Json& value) { return "data: " + dump_json(value) + "\n\n"; }

std::string sse_event(const std::string& type, const Json& value) {
  return "event: " + type + "\ndata: " + dump_json(value) + "\n\n";
}

BuilderBase::BuilderBase(const ApiRequest& request, const ModelContext& model, std::string response_id,
                         int64_t created_unix)
    : request_(request), model_(model), id_(std::move(response_id)), created_(created_unix) {
  samples_.resize(static_cast<size_t>(std::max(request.sampling.n, 1)));
  if (request.kind != ApiKind::kCompletions) {
    for (SampleState& s : samples_) s.parser = OutputParser::create(model.family, request.parsing);
  }
  num_prompt_tokens_ = static_cast<int32_t>(request.prompt_token_ids.size());
}

void BuilderBase::note_output(const RequestOutput& output) {
  if (output.num_prompt_tokens > 0) num_prompt_tokens_ = output.num_prompt_tokens;
  num_cached_tokens_ = std::max(num_cached_tokens_, output.num_cached_tokens);
}

std::vector<OutputEvent> BuilderBase::absorb(const SampleOutput& sample) {
  DI_CHECK(sample.index >= 0 && static_cast<size_t>(sample.index) < samples_.size());
  SampleState& s = samples_[static_cast<size_t>(sample.index)];
  s.token_ids.insert(s.token_ids.end(), sample.new_token_ids.begin(), sample.new_token_ids.end());
  s.logprobs.insert(s.logprobs.end(), sample.new_logprobs.begin(), sample.new_logprobs.end());
  s.num_draft_tokens = std::max(s.num_draft_tokens, sample.num_draft_tokens);
  s.num_accepted_draft_tokens = std::max(s.num_accepted_draft_tokens, sample.num_accepted_draft_tokens);
  std::vector<OutputEvent> events;
  if (s.parser) {
    events = s.parser->push(sample.new_text);
    if (sample.finished) {
      for (OutputEvent& e : s.parser->finish()) append_event(events, std::move(e));
    }
  } else if (!sample.new_text.empty()) {
    events.push_back(OutputEvent{OutputEventKind::kText, sample.new_text, "", 0});
  }
  if (sample.finished) {
    s.finished = true;
    s.finish_reason = sample.finish_reason;
    s.stop_reason = sample.stop_reason;
  }
  for (const OutputEvent& e : events) {
    switch (e.kind) {
      case OutputEventKind::kText:
        s.text += e.text;
        break;
      case OutputEventKind::kReasoning:
        s.reasoning += e.text;
        break;
      case OutputEventKind::kToolCallBegin:
        s.tool_calls.push_back(ToolCallState{
            tool_call_id(request_.kind == ApiKind::kMessages ? "toolu_" : "call_", static_cast<size_t>(sample.index),
                         static_cast<size_t>(e.tool_index)),
            e.name, ""});
        break;
      case OutputEventKind::kToolCallArguments:
        s.tool_calls[static_cast<size_t>(e.tool_index)].arguments += e.text;
        break;
    }
  }
  return events;
}

int32_t BuilderBase::num_completion_tokens() const {
  size_t n = 0;
  for (const SampleState& s : samples_) n += s.token_ids.size();
  return static_cast<int32_t>(n);
}

void BuilderBase::add_warnings(Json& object) const {
  if (request_.warnings.empty()) return;
  object["warnings"] = request_.warnings;
}

Json BuilderBase::openai_header(const char* object) const {
  return Json{{"id", id_}, {"object", object}, {"created", created_}, {"model", model_.served_name},
              {"system_fingerprint", nullptr}};
}

std::vector<std::string> BuilderBase::openai_stream_end(Json header) const {
  std::vector<std::string> frames;
  if (request_.include_usage || !request_.warnings.empty()) {
    header["choices"] = Json::array();
    if (request_.include_usage) header["usage"] = usage_openai();
    add_warnings(header);
    frames.push_back(sse_data(header));
  }
  frames.push_back("data: [DONE]\n\n");
  return frames;
}

Json BuilderBase::usage_openai() const {
  const int32_t completion = num_completion_tokens();
  Json usage{{"prompt_tokens", num_prompt_tokens_},
             {"completion_tokens", completion},
             {"total_tokens", num_prompt_tokens_ + completion},
             {"prompt_tokens_details", {{"cached_tokens", num_cached_tokens_}}}};
  add_speculative_usage(usage);
  return usage;
}

void BuilderBase::add_speculative_usage(Json& usage) const {
  int64_t drafts = 0;
  int64_t accepted = 0;
  for (const SampleState& s : samples_) {
    drafts += s.num_draft_tokens;
    accepted += s.num_accepted_draft_tokens;
  }
  if (drafts == 0) return;
  usage["speculative"] = {{"draft_tokens", drafts}, {"accepted_draft_tokens", accepted}};
}

std::string BuilderBase::tool_call_id(const char* prefix, size_t sample, size_t index) const {
  // The response id without its own prefix keeps the call id short and unique.
  const size_t cut = id_.find_first_of("-_");
  const std::string base = cut == std::string::npos ? id_ : id_.substr(cut + 1);
  return prefix + base + "_" + std::to_string(sample) + "_" + std::to_string(index);
}

std::string BuilderBase::openai_finish_reason(const SampleState& sample) const {
  if (sample.finish_reason == FinishReason::kLength) return "length";
  if (!sample.tool_calls.empty()) return "tool_calls";
  return "stop";
}

std::string BuilderBase::token_text(int32_t token_id) const {
  // decode() shows a token holding part of a character as U+FFFD, so the text is valid UTF-8.
  return model_.tokenizer->decode({token_id}, false);
}

Json BuilderBase::token_bytes(int32_t token_id) const {
  Json bytes = Json::array();
  for (const unsigned char c : model_.tokenizer->decode({token_id}, false)) bytes.push_back(static_cast<int>(c));
  return bytes;
}

}  // namespace api

std::unique_ptr<ApiResponseBuilder> ApiResponseBuilder::create(const ApiRequest& request, const ModelContext& model,
                                                               std::string response_id, int64_t created_unix) {
  switch (request.kind) {
    case ApiKind::kChatCompletions:
      return api::make_chat_builder(request, model, std::move(response_id), created_unix);
    case ApiKind::kCompletions:
      return api::make_completions_builder(request, model, std::move(response_id), created_unix);
    case ApiKind::kResponses:
      return api::make_responses_builder(request, model, std::move(response_id), created_unix);
    case ApiKind::kMessages:
      return api::make_messages_builder(request, model, std::move(response_id), created_unix);
  }
  return nullptr;
}

}  // namespace deepinfer
