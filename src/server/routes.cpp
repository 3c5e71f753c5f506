// The server's non-generation routes (/health, /v1/models, /metrics, /tokenize, /detokenize) and
// the response helpers every route uses.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>

#include "core/json_nesting.h"
#include "core/thread_pool.h"
#include "recipe/chat_template.h"
#include "recipe/prompt.h"
#include "server/encoder_selector.h"
#include "server/image_encoder_service.h"
#include "server/rank_router.h"
#include "server/server_context.h"
#include "server/worker_selector.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace deepinfer::server {
namespace {

namespace asio = boost::asio;
using Json = nlohmann::ordered_json;

HttpResponse json_response(const HttpRequest& request, const Json& body) {
  return make_response(request, http::status::ok, body.dump());
}

HttpResponse bad_request(const HttpRequest& request, std::string message, std::string param = "") {
  return make_error_response(request, ApiKind::kChatCompletions,
                             api_error(ApiKind::kChatCompletions, 400, std::move(message), std::move(param)));
}

}  // namespace

int32_t served_max_model_len(const ServerContext& context) {
  const std::optional<int32_t> workers = context.cluster ? context.cluster->max_model_len() : std::nullopt;
  return workers.value_or(context.model.max_model_len);
}

namespace {

HttpResponse models(const HttpRequest& request, const ServerContext& context) {
  const Json model = {{"id", context.model.served_name},
                      {"object", "model"},
                      {"created", context.started_unix},
                      {"owned_by", "deepinfer"},
                      {"root", context.model.served_name},
                      {"max_model_len", served_max_model_len(context)}};
  return json_response(request, Json{{"object", "list"}, {"data", Json::array({model})}});
}

// vLLM's /tokenize: {"prompt": text, "add_special_tokens": true} or {"messages": [...], ...}
// rendered with the chat template; answers {"count", "max_model_len", "tokens", "token_strs"}.
HttpResponse tokenize(const HttpRequest& request, const ServerContext& context, const Json& body) {
  const Tokenizer* tokenizer = context.model.tokenizer;
  std::vector<int32_t> ids;
  if (body.contains("messages")) {
    const ImageInputFormat* images = context.model.image_input;
    auto segments = render_chat_request(context.model.family, body,
                                        images == nullptr              ? 0
                                        : images->tokens_per_image > 0 ? images->tokens_per_image
                                                                       : kImageTokensBySize);
    if (!segments.ok()) return bad_request(request, segments.error().message, "messages");
    auto encoded = encode_prompt(*tokenizer, *segments, context.model.pool);
    if (!encoded.ok()) return bad_request(request, encoded.error().message, "messages");
    ids = std::move(*encoded);
  } else if (body.contains("prompt")) {
    if (!body["prompt"].is_string()) return bad_request(request, "'prompt' must be a string", "prompt");
    bool add_special = true;
    if (body.contains("add_special_tokens")) {
      if (!body["add_special_tokens"].is_boolean()) {
        return bad_request(request, "'add_special_tokens' must be a boolean", "add_special_tokens");
      }
      add_special = body["add_special_tokens"].get<bool>();
    }
    auto encoded = tokenizer->encode(body["prompt"].get_ref<const std::string&>());
    if (!encoded.ok()) return bad_request(request, encoded.error().message, "prompt");
    ids = add_special ? tokenizer->add_special_tokens(*encoded) : std::move(*encoded);
  } else {
    return bad_request(request, "give 'prompt' (a string) or 'messages' (a chat)");
  }
  Json token_strs = nullptr;
  if (body.value("return_token_strs", false)) {
    token_strs = Json::array();
    for (int32_t id : ids) token_strs.push_back(tokenizer->id_to_token(id).value_or(""));
  }
  return json_response(request, Json{{"count", ids.size()},
                                     {"max_model_len", served_max_model_len(context)},
                                     {"tokens", ids},
                                     {"token_strs", token_strs}});
}

// vLLM's /detokenize: {"tokens": [ids]} -> {"prompt": text}.
HttpResponse detokenize(const HttpRequest& request, const ServerContext& context, const Json& body) {
  const Tokenizer* tokenizer = context.model.tokenizer;
  if (!body.contains("tokens") || !body["tokens"].is_array()) {
    return bad_request(request, "'tokens' must be an array of token ids", "tokens");
  }
  std::vector<int32_t> ids;
  const Json& tokens = body["tokens"];
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string field = "tokens[" + std::to_string(i) + "]";
    if (!tokens[i].is_number_integer()) return bad_request(request, "'" + field + "' must be an integer", field);
    const int64_t id = tokens[i].get<int64_t>();
    if (id < 0 || id >= context.model.vocab_size) {
      return bad_request(request,
                         "'" + field + "' is " + std::to_string(id) + ", outside the vocabulary [0, " +
                             std::to_string(context.model.vocab_size) + ")",
                         field);
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  return json_response(request, Json{{"prompt", tokenizer->decode(ids, false)}});
}

}  // namespace

std::variant<nlohmann::ordered_json, ApiError> parse_json_body(ApiKind kind, const std::string& body) {
  const size_t bad = tokenizer::find_invalid_utf8(body);
  if (bad != SIZE_MAX) return api_error(kind, 400, "request body is not valid UTF-8 (bad byte at offset " + std::to_string(bad) + ")");
  if (const int64_t depth = json_nesting_depth(body); depth > kMaxJsonNesting) {
    return api_error(kind, 400, "request body nests arrays and objects " + std::to_string(depth) +
                                    " deep; the limit is " + std::to_string(kMaxJsonNesting));
  }
  Json parsed;
  try {
    parsed = Json::parse(body);
  } catch (const nlohmann::json::parse_error& e) {
    // what() starts with "[json.exception.parse_error.101] "; the rest names line and column.
    const std::string what = e.what();
    const size_t start = what.find("] ");
    return api_error(kind, 400, "request body is not valid JSON: " + (start == std::string::npos ? what : what.substr(start + 2)));
  }
  if (!parsed.is_object()) return api_error(kind, 400, "request body must be a JSON object");
  return parsed;
}

HttpResponse make_response(const HttpRequest& request, http::status status, std::string body, const char* content_type) {
  HttpResponse response{status, request.version()};
  response.set(http::field::server, "deepinfer");
  response.set(http::field::content_type, content_type);
  response.keep_alive(request.keep_alive());
  response.body() = std::move(body);
  response.prepare_payload();
  return response;
}

HttpResponse make_error_response(const HttpRequest& request, ApiKind kind, const ApiError& error) {
  return make_response(request, static_cast<http::status>(error.status), error_body(kind, error));
}

asio::awaitable<bool> write_response(TcpStream& stream, HttpResponse response, double timeout_s) {
  stream.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(timeout_s)));
  auto [error, bytes] = co_await http::async_write(stream, response, asio::as_tuple(asio::use_awaitable));
  stream.expires_never();
  co_return !error && response.keep_alive();
}

std::optional<HttpResponse> handle_info_route(const HttpRequest& request, ServerContext& context) {
  std::string_view path = request.target();
  path = path.substr(0, path.find('?'));
  if (path == "/health") {
    const std::optional<std::string> unavailable =
        context.encoder != nullptr ? context.encoder->unavailable() : context.worker->unavailable();
    if (!unavailable) return make_response(request, http::status::ok, "");
    return make_error_response(request, ApiKind::kChatCompletions, api_error(ApiKind::kChatCompletions, 503, *unavailable));
  }
  if (path == "/v1/models") return models(request, context);
  if (path == "/metrics") {
    std::string text = context.metrics->render();
    if (context.router != nullptr) context.router->render_metrics(text);
    if (context.cluster != nullptr) context.cluster->render_metrics(text);
    if (context.encoders != nullptr) context.encoders->render_metrics(text);
    return make_response(request, http::status::ok, std::move(text), "text/plain; version=0.0.4");
  }
  if (path != "/tokenize" && path != "/detokenize") return std::nullopt;
  auto body = parse_json_body(ApiKind::kChatCompletions, request.body());
  if (const ApiError* error = std::get_if<ApiError>(&body)) {
    return make_error_response(request, ApiKind::kChatCompletions, *error);
  }
  const Json& json = std::get<Json>(body);
  return path == "/tokenize" ? tokenize(request, context, json) : detokenize(request, context, json);
}

}  // namespace deepinfer::server
