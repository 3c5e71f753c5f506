// Shared steps of the request conversions (api_request*.cpp): field checks that name the field,
// and the common tail that renders, encodes and bounds a chat-style request.
#pragma once

#include <optional>
#include <string>
#include <variant>

#include "recipe/api.h"
#include "recipe/conversation.h"

namespace deepinfer::api {

using Json = nlohmann::ordered_json;
using ParseResult = std::variant<ApiRequest, ApiError>;

ApiError bad_request(std::string param, std::string message);
// A Result error turned into a 400; the field is read from the message ("messages[1].content:
// ..." or "field 'top_p' must ...").
ApiError from_error(const Error& error);
// "<path>: expected <what>, got <json type>".
ApiError wrong_type(const std::string& path, const std::string& expected, const Json& got);

// The member or nullptr when absent or null.
const Json* find_field(const Json& object, const char* key);
// Checks an optional member's type; nullopt when absent, null or of the right type.
std::optional<ApiError> check_string(const Json& object, const char* key, const std::string& path);
std::optional<ApiError> check_bool(const Json& object, const char* key, const std::string& path);
std::optional<ApiError> check_object(const Json& object, const char* key, const std::string& path);
std::optional<ApiError> check_array(const Json& object, const char* key, const std::string& path);

enum class ToolChoice { kAuto, kNone, kRequired };

// What a chat-style API (Chat Completions, Responses, Messages) gives the common tail.
struct ChatInput {
  Conversation conversation;
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string named_tool;             // a tool_choice naming one tool: only it is offered
  std::optional<bool> thinking;       // an explicit thinking switch
  std::optional<std::string> effort;  // reasoning effort as sent (none|minimal|low|medium|high|xhigh|max)
  Json template_kwargs = Json::object();  // Chat: chat_template_kwargs (wins over the above)
  Json sampling_fields = Json::object();  // OpenAI-named sampling fields for sampling_params_from_json
  const char* max_tokens_field = "max_tokens";  // the field the client uses, for errors
  const char* prompt_field = "messages";
};

// Renders input.conversation with the served family, encodes it special-token safe, fills the
// sampling parameters (default max_tokens: the rest of the context) and the output parsing, and
// checks the prompt and max_tokens against the context.
ParseResult finish_chat_request(ApiRequest request, ChatInput input, const ModelContext& model);
// Sampling fields -> request.sampling, then the context-length check; shared with Completions.
std::optional<ApiError> apply_sampling(ApiRequest& request, const Json& fields, const char* max_tokens_field,
                                       int32_t default_max_tokens, const char* prompt_field, const ModelContext& model);
// The top-level fields every API shares: model (a string), stream, and the vLLM extensions
// priority and cache_salt.
std::optional<ApiError> parse_common(const Json& body, ApiRequest& request);
// response_format / text.format / guided_*: kept for structured output.
void keep_structured_output(const Json& body, ApiRequest& request);

// Lenient JSON Schema output (strict false): runs the front end now, so the keywords it drops
// reach request.warnings; a schema it still cannot compile is a 400 naming the field.
std::optional<ApiError> collect_structured_warnings(ApiRequest& request);
// Tool calls in the family's own markup (recipe/tool_call_grammar.h), set as request.sampling's
// structured output: required (tool_choice "required" or a named function) gives exactly one call
// of one of tools; auto gives free text or one call, and only when a tool is strict and no
// response_format / guided_* is given. Arguments validate against each tool's parameters
// (lenient unless the tool is strict; drops go to request.warnings). Needs request.parsing and
// request.thinking set. Errors: a required call with response_format, or a strict tool whose
// parameters the engine cannot enforce.
std::optional<ApiError> constrain_tool_calls(ApiRequest& request, const std::vector<Json>& tools, bool required,
                                             const ModelContext& model);

// The image parts of a chat request's messages (Chat image_url, Responses input_image, Messages
// image), in the order the messages hold them: each is decoded, so a bad one is a 400 naming its
// part (bad base64, truncated, wrong type, over max_pixels, ...); a URL is refused unless fetched
// (never, today). A model with an image encoder (ModelContext::image_input) gets each one
// preprocessed into images (first_token -1 until the prompt is encoded: place_images); a
// text-only model refuses a good image with a 400.
std::optional<ApiError> read_image_parts(ApiKind kind, const Json& body, const ModelContext& model,
                                         std::vector<ImageInput>& images);
// Gives each of request.images its first placeholder token: the runs of the model's image token in
// the encoded prompt, in order, each between the model's image delimiters. A 400 naming field when
// the template placed a different number (an image in a system message, which Gemma 3's template
// drops) or a run that is not one image.
std::optional<ApiError> place_images(ApiRequest& request, const ModelContext& model, const std::string& field);

ParseResult parse_chat_completions(const Json& body, const ModelContext& model);
ParseResult parse_completions(const Json& body, const ModelContext& model);
ParseResult parse_responses(const Json& body, const ModelContext& model);
ParseResult parse_messages(const Json& body, const ModelContext& model);

}  // namespace deepinfer::api
