// What the per-API response builders share: SSE framing, and per-sample bookkeeping (the output
// parser, accumulated text, reasoning and tool calls, token counts, logprobs, finish).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "recipe/api.h"
#include "recipe/output_parser.h"

namespace deepinfer::api {

using Json = nlohmann::ordered_json;

// Compact JSON; invalid UTF-8 is replaced rather than thrown on.
std::string dump_json(const Json& value);
std::string sse_data(const Json& value);                            // "data: {...}\n\n"
std::string sse_event(const std::string& type, const Json& value);  // "event: X\ndata: {...}\n\n"

struct ToolCallState {
  std::string id;
  std::string name;
  std::string arguments;
};

struct SampleState {
  std::unique_ptr<OutputParser> parser;  // null for Completions (raw text)
  std::string text;
  std::string reasoning;
  std::vector<ToolCallState> tool_calls;
  std::vector<int32_t> token_ids;
  std::vector<TokenLogprob> logprobs;
  bool started = false;
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string stop_reason;
  int32_t num_draft_tokens = 0;  // speculative decoding: drafts verified, and of them accepted
  int32_t num_accepted_draft_tokens = 0;
};

class BuilderBase : public ApiResponseBuilder {
 public:
  BuilderBase(const ApiRequest& request, const ModelContext& model, std::string response_id, int64_t created_unix);

 protected:
  // Feeds one sample's step through its parser into its state; returns the new events. Call
  // note_output(output) first for each RequestOutput.
  std::vector<OutputEvent> absorb(const SampleOutput& sample);
  void note_output(const RequestOutput& output);
  int32_t num_completion_tokens() const;
  Json usage_openai() const;  // Chat / Completions usage
  // With speculative decoding, usage["speculative"] = {"draft_tokens", "accepted_draft_tokens"}
  // (an extension field, over every sample); nothing otherwise.
  void add_speculative_usage(Json& usage) const;
  // The id / object / created / model fields every Chat and Completions body and chunk starts with.
  Json openai_header(const char* object) const;
  // Chat / Completions stream end: a last chunk with no choices when usage or warnings are due
  // (header: the builder's chunk header), then "data: [DONE]".
  std::vector<std::string> openai_stream_end(Json header) const;
  // Sets object["warnings"] to the request's structured-output warnings, when there are any.
  void add_warnings(Json& object) const;
  // "call_<id>_<n>" / "toolu_<id>_<n>": unique within the response.
  std::string tool_call_id(const char* prefix, size_t sample, size_t index) const;
  // stop | length | tool_calls.
  std::string openai_finish_reason(const SampleState& sample) const;
  // The token's text as the API shows it (special tokens spelled out; part of a character is
  // U+FFFD), and that text's bytes.
  std::string token_text(int32_t token_id) const;
  Json token_bytes(int32_t token_id) const;

  ApiRequest request_;
  ModelContext model_;
  std::string id_;
  int64_t created_;
  std::vector<SampleState> samples_;
  int32_t num_prompt_tokens_ = 0;
  int32_t num_cached_tokens_ = 0;
};

std::unique_ptr<ApiResponseBuilder> make_chat_builder(const ApiRequest&, const ModelContext&, std::string, int64_t);
std::unique_ptr<ApiResponseBuilder> make_completions_builder(const ApiRequest&, const ModelContext&, std::string,
                                                             int64_t);
std::unique_ptr<ApiResponseBuilder> make_responses_builder(const ApiRequest&, const ModelContext&, std::string,
                                                           int64_t);
std::unique_ptr<ApiResponseBuilder> make_messages_builder(const ApiRequest&, const ModelContext&, std::string,
                                                          int64_t);

}  // namespace deepinfer::api
