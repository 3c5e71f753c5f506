// The HTTP API surface of the recipe layer: OpenAI Chat Completions, Completions and Responses
// and Anthropic Messages request bodies -> one engine request, and engine outputs -> each API's
// response body or SSE frames. Pure translation: no I/O, no threads, no engine calls.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "deepinfer/sampling_params.h"
#include "engine/engine_core.h"
#include "image/image.h"
#include "recipe/chat_template.h"

namespace deepinfer {

class ThreadPool;
class Tokenizer;

enum class ApiKind { kChatCompletions, kCompletions, kResponses, kMessages };

// An error answered to the client. type is the API's error type: OpenAI "invalid_request_error",
// "authentication_error", "not_found_error", "rate_limit_error", "server_error"; Anthropic
// "invalid_request_error", "authentication_error", "not_found_error", "rate_limit_error",
// "overloaded_error", "api_error". param is the offending field ("messages[1].content") or "".
struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string param;
  std::string message;
};

// The error for an HTTP status, with the API's type for it (400/405/422 invalid_request_error,
// 401 authentication_error, 403 permission_error, 404 not_found_error, 408/504 timeout_error,
// 413 request_too_large (Anthropic) / invalid_request_error, 429 rate_limit_error, 529
// overloaded_error, other 5xx api_error (Anthropic) / server_error).
ApiError api_error(ApiKind kind, int status, std::string message, std::string param = "");
// 404 for a request naming a model this server does not serve.
ApiError model_not_found_error(ApiKind kind, const std::string& requested, const std::string& served_name);
// The API's error JSON: OpenAI {"error":{"message","type","param","code"}}, Anthropic
// {"type":"error","error":{"type","message"}}. Serialized, ready to send.
std::string error_body(ApiKind kind, const ApiError& error);

// How image parts of chat requests are read (docs/images.md).
struct ImageInputOptions {
  int64_t max_pixels = kDefaultMaxImagePixels;  // serve --max-image-pixels
  // serve --max-images-per-request: a request's image parts are counted before any is decoded (a
  // 150-byte PNG becomes megabytes of pixels).
  int32_t max_images = 8;
  // Off (a router): each image's file is kept as sent (ImageInput::file) for the worker that runs
  // the request to decode and preprocess again, instead of its pixels.
  bool preprocess = true;
  // serve --allow-image-urls: the server fetches http(s) image URLs (server/image_fetch.h) and puts
  // each file in the body as a data: URL before the request is parsed; an http(s) URL the parser
  // still finds is refused.
  bool allow_urls = false;
};

// What the recipe needs to know about the served model. tokenizer, max_model_len and vocab_size
// (the model's, which bounds prompt token ids) are required. Pointers are borrowed and must
// outlive every call that takes the context; pool may be null (prompt encoding then runs inline).
struct ModelContext {
  std::string served_name;
  const Tokenizer* tokenizer = nullptr;
  ChatFamily family = ChatFamily::kQwen3;
  int32_t max_model_len = 0;
  int32_t vocab_size = 0;
  ThreadPool* pool = nullptr;
  int32_t default_max_tokens = 0;  // 0: whatever context is left after the prompt
  int32_t max_n = 128;             // the most samples (n) one request may ask for
  ImageInputOptions images;
  // How the served model takes images (CausalLM::image_input); null: it takes none.
  const ImageInputFormat* image_input = nullptr;
  // A vision encoder the checkpoint has but the server does not run (its vision_config's
  // model_type, e.g. a router that holds no model), named when images are refused; empty: none.
  std::string skipped_vision_encoder = {};
};

// How the generated text is split (see output_parser.h): set by the request conversion from the
// family, the thinking switch and the tools.
struct OutputParsing {
  bool starts_in_reasoning = false;  // the prompt already opened the reasoning block
  bool parse_reasoning = false;      // the family marks reasoning in its output at all
  bool parse_tool_calls = false;     // tools were given and tool_choice is not "none"
};

// One parsed request, ready for EngineCore::add_request(prompt_token_ids, sampling, priority,
// cache_salt).
struct ApiRequest {
  ApiKind kind = ApiKind::kChatCompletions;
  std::string model;  // as the client sent it (the server compares it with served_name)
  bool stream = false;
  bool include_usage = false;  // Chat/Completions stream_options.include_usage
  std::vector<int32_t> prompt_token_ids;
  // The messages' images, preprocessed for the model's encoder, each at its placeholder tokens.
  std::vector<ImageInput> images;
  std::string prompt_text;  // Completions: the prompt as text (for echo); chat APIs: the rendered prompt
  SamplingParams sampling;  // sampling.n is the number of choices
  bool echo = false;        // Completions
  bool logprobs = false;    // return logprobs (Chat logprobs:true, Completions logprobs:int)
  int32_t top_logprobs = 0;
  bool thinking = false;    // the prompt asked the model to reason
  OutputParsing parsing;
  // response_format / text.format / guided_json / guided_regex / guided_grammar / guided_choice as
  // sent, wrapped as {"<field name>": value}; nullopt when none was given or it is plain text.
  std::optional<nlohmann::ordered_json> structured_output;
  // What lenient structured output dropped (JSON Schema keywords the engine cannot enforce); the
  // response carries them as a top-level "warnings" array.
  std::vector<std::string> warnings;
  std::string cache_salt;
  // Extension field kv_cache_class: how long the persistent KV store keeps the prompt's pages.
  TrafficClass kv_cache_class = TrafficClass::kDefault;
  int32_t priority = 0;
  // Request fields a response echoes back (Responses: instructions, tools, tool_choice,
  // temperature, top_p, max_output_tokens, metadata, ...; Messages: nothing).
  nlohmann::ordered_json echo_fields = nlohmann::ordered_json::object();
};

// Validates and converts a request body. Unknown fields are ignored; a known field of the wrong
// type, a prompt that does not fit max_model_len with its max_tokens, or a token id outside the
// vocabulary is a 400 naming the field. The model name is not checked (model_not_found_error).
// An image file as a chat request sends it (PNG, JPEG, WebP, GIF; media_type as declared, or empty)
// decoded within model.images' limits and preprocessed for model's encoder into images (first_token
// -1; the file kept too, for a relay), or only kept when model.images.preprocess is off; a 400
// naming path when the file is bad
// or the model takes no images. The APIs' image parts come through here, and a worker reads the
// files a router relays with it.
// image as format's processor makes it for its encoder (first_token -1, no hash): the pixels and
// their grid, or with make_pixels off (a router, which encodes nothing) the grid alone, from the
// resized size, so the image is placed as its worker will place it. Errors are the processor's (an
// image too small or too elongated for Qwen2-VL's).
Result<ImageInput> preprocess_image(const RgbImage& image, const ImageInputFormat& format, bool make_pixels = true);

std::optional<ApiError> read_image_file(std::vector<uint8_t> file, const std::string& media_type,
                                        const std::string& path, const ModelContext& model,
                                        std::vector<ImageInput>& images);

std::variant<ApiRequest, ApiError> parse_api_request(ApiKind kind, const nlohmann::ordered_json& body,
                                                     const ModelContext& model);

// An http(s) URL of an image part: the part as errors name it ("messages[1].content[0]"), the JSON
// pointer of the URL string in the body, and the URL.
struct RemoteImageUrl {
  std::string path;
  std::string pointer;
  std::string url;
};
// The body's http(s) image URLs in order (Chat image_url, Responses input_image, Messages url
// sources), for a server that fetches them; errors as parse_api_request's for too many image parts
// or an image part Chat Completions does not take.
std::variant<std::vector<RemoteImageUrl>, ApiError> remote_image_urls(ApiKind kind, const nlohmann::ordered_json& body,
                                                                      const ModelContext& model);

// Turns one request's engine outputs into its API's response. One builder per request; not
// thread-safe. Feed it every RequestOutput of the request in order (streaming or not).
class ApiResponseBuilder {
 public:
  // response_id: a unique id for this response ("chatcmpl-...", "cmpl-...", "resp_...",
  // "msg_..."; the builder uses it as given). created_unix: the creation time in seconds.
  static std::unique_ptr<ApiResponseBuilder> create(const ApiRequest& request, const ModelContext& model,
                                                    std::string response_id, int64_t created_unix);
  virtual ~ApiResponseBuilder() = default;

  // Streaming: frames to send now ("data: {...}\n\n" for OpenAI Chat/Completions, "event: X\ndata:
  // {...}\n\n" for Responses and Messages); the first call also yields the opening frames. Also
  // accumulates state for final_body(), so it must be called in non-streaming mode too.
  virtual std::vector<std::string> on_output(const RequestOutput& output) = 0;
  // The frames that end a finished stream (usage chunk, "data: [DONE]", response.completed,
  // message_delta + message_stop ...). Call once, after the output with finished == true.
  virtual std::vector<std::string> finish_stream() = 0;
  // Non-streaming: the whole response body once the request finished.
  virtual nlohmann::ordered_json final_body() = 0;
  // A failure mid-stream: the API's error frame (OpenAI: a data frame with {"error":...};
  // Responses: response.failed; Messages: event: error). The stream ends after it.
  virtual std::string stream_error(const ApiError& error) = 0;
};

}  // namespace deepinfer
