// The four generation endpoints: request -> recipe (parse_api_request) -> engine thread ->
// ApiResponseBuilder -> one JSON body, or SSE frames in chunks as the engine produces them.
// While a request runs, its connection also watches the socket (a client that hangs up cancels
// the request and frees its KV at once) and its deadline (--request-timeout).
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <random>

#include "core/logging.h"
#include "server/image_fetch.h"
#include "server/running_request.h"
#include "server/server_context.h"

namespace deepinfer::server {
namespace {

namespace asio = boost::asio;
using Json = nlohmann::ordered_json;
constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

std::string endpoint_name(ApiKind kind) {
  switch (kind) {
    case ApiKind::kChatCompletions: return "/v1/chat/completions";
    case ApiKind::kCompletions: return "/v1/completions";
    case ApiKind::kResponses: return "/v1/responses";
    case ApiKind::kMessages: return "/v1/messages";
  }
  return "other";
}

std::string response_id(ApiKind kind) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = kind == ApiKind::kChatCompletions ? "chatcmpl-"
                   : kind == ApiKind::kCompletions   ? "cmpl-"
                   : kind == ApiKind::kResponses     ? "resp_"
                                                     : "msg_";
  for (int i = 0; i < 24; ++i) id += kHex[rng() % 16];
  return id;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string join(const std::vector<std::string>& frames) {
  std::string out;
  for (const std::string& frame : frames) out += frame;
  return out;
}

class GenerationHandler {
 public:
  GenerationHandler(TcpStream& stream, const HttpRequest& request, ApiKind kind, ServerContext& context)
      : stream_(stream), request_(request), kind_(kind), context_(context), endpoint_(endpoint_name(kind)) {}

  asio::awaitable<bool> run(std::variant<ApiRequest, ApiError> parsed) {
    if (const ApiError* error = std::get_if<ApiError>(&parsed)) co_return co_await reply_error(*error);
    ApiRequest& api = std::get<ApiRequest>(parsed);
    if (!api.model.empty() && api.model != context_.model.served_name) {
      co_return co_await reply_error(model_not_found_error(kind_, api.model, context_.model.served_name));
    }
    auto channel = std::make_shared<OutputChannel>(stream_.get_executor(),
                                                   static_cast<size_t>(context_.config.stream_buffer_outputs));
    RunningRequest running(stream_, context_, channel);
    Submission submission{api.prompt_token_ids, api.sampling, api.priority, api.cache_salt, channel, api.kv_cache_class};
    submission.images = std::move(api.images);
    const Admission admission = context_.worker->submit(std::move(submission));
    if (const Refusal* refusal = std::get_if<Refusal>(&admission)) {
      const int status = !refusal->overloaded ? 503 : kind_ == ApiKind::kMessages ? 529 : 429;
      co_return co_await reply_error(api_error(kind_, status, refusal->message));
    }
    running.set_id(std::get<int64_t>(admission));
    grammar_field_ = api.structured_output ? api.structured_output->begin().key() : "tools";
    auto builder = ApiResponseBuilder::create(api, context_.model, response_id(kind_), unix_now());
    bool keep_alive = false;
    if (api.stream) {
      keep_alive = co_await stream_response(running, *builder);
    } else {
      keep_alive = co_await whole_response(running, *builder);
    }
    co_return keep_alive;
  }

  bool response_started() const { return response_started_; }

 private:
  asio::awaitable<bool> reply_error(const ApiError& error) {
    response_started_ = true;
    context_.metrics->record_request(endpoint_, error.status);
    HttpResponse response = make_error_response(request_, kind_, error);
    if (error.status == 429 || error.status == 529) response.set(http::field::retry_after, "1");
    co_return co_await write_response(stream_, std::move(response), context_.config.write_timeout_s);
  }

  // The engine failed the request before its first token: its grammar did not compile (an
  // unsupported keyword, a timeout). The client's error, naming the field that asked for it.
  ApiError failed_error(const Error& error) const { return api_error(kind_, 400, error.message, grammar_field_); }

  // An event's error in the API's shape; an overloaded cluster worker's 429 is Anthropic's 529 on
  // /v1/messages, as the local queue's refusal is.
  ApiError engine_error(const EngineEvent& event) const {
    const int status = event.error_status == 429 && kind_ == ApiKind::kMessages ? 529 : event.error_status;
    return api_error(kind_, status, event.error->message);
  }

  ApiError timeout_error() const {
    return api_error(kind_, 408, "the request ran past the server's limit of " +
                                     std::to_string(context_.config.request_timeout_s) + " s (--request-timeout)");
  }

  asio::awaitable<bool> whole_response(RunningRequest& running, ApiResponseBuilder& builder) {
    EngineEvent event;
    for (;;) {
      const Wait wait = co_await running.next(event);
      if (wait == Wait::kDisconnected) {
        context_.metrics->record_request(endpoint_, 499);
        running.abort();
        co_return false;
      }
      if (wait == Wait::kTimedOut) {
        running.abort();
        co_return co_await reply_error(timeout_error());
      }
      if (wait == Wait::kDropped) co_return co_await reply_error(api_error(kind_, 500, "the request was dropped"));
      if (event.error) co_return co_await reply_error(engine_error(event));
      if (event.output.error) co_return co_await reply_error(failed_error(*event.output.error));
      builder.on_output(event.output);
      if (event.output.finished) break;
    }
    std::string body = builder.final_body().dump();
    response_started_ = true;
    context_.metrics->record_request(endpoint_, 200);
    co_return co_await write_response(stream_, make_response(request_, http::status::ok, std::move(body)),
                                      context_.config.write_timeout_s);
  }

  asio::awaitable<bool> write_chunk(const std::string& data) {
    if (data.empty()) co_return true;
    stream_.expires_after(write_timeout());
    auto [error, bytes] = co_await asio::async_write(stream_, http::make_chunk(asio::buffer(data)), kTuple);
    co_return !error;
  }

  asio::awaitable<bool> end_stream(const std::string& last_frames) {
    if (!co_await write_chunk(last_frames)) co_return false;
    stream_.expires_after(write_timeout());
    auto [error, bytes] = co_await asio::async_write(stream_, http::make_chunk_last(), kTuple);
    stream_.expires_never();
    co_return !error && request_.keep_alive();
  }

  std::chrono::steady_clock::duration write_timeout() const {
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(context_.config.write_timeout_s));
  }

  // Headers go out with the first engine event, so a request the engine refuses still gets a
  // plain error response with its status code. So does one whose grammar fails to compile: the
  // engine holds a constrained request's first token until its compile is done, so a failed
  // compile is the request's first event.
  asio::awaitable<bool> stream_response(RunningRequest& running, ApiResponseBuilder& builder) {
    EngineEvent event;
    bool headers_sent = false;
    for (;;) {
      const Wait wait = co_await running.next(event);
      if (wait == Wait::kDisconnected || wait == Wait::kDropped) {
        context_.metrics->record_request(endpoint_, headers_sent ? 200 : 499);
        running.abort();
        co_return false;
      }
      if (wait == Wait::kTimedOut) {
        running.abort();
        if (!headers_sent) co_return co_await reply_error(timeout_error());
        context_.metrics->record_request(endpoint_, 200);
        co_return co_await end_stream(builder.stream_error(timeout_error()));
      }
      if (event.error || event.output.error) {
        const ApiError error = event.error ? engine_error(event) : failed_error(*event.output.error);
        if (!headers_sent) co_return co_await reply_error(error);
        // Mid-stream (a grammar that did not compile, a failed step, shutdown): the API's error
        // event ends the stream.
        context_.metrics->record_request(endpoint_, error.status);
        co_return co_await end_stream(builder.stream_error(error));
      }
      if (!headers_sent) {
        if (!co_await send_headers()) {
          running.abort();
          co_return false;
        }
        headers_sent = true;
      }
      if (!co_await write_chunk(join(builder.on_output(event.output)))) {
        context_.metrics->record_request(endpoint_, 200);
        running.abort();
        co_return false;
      }
      if (event.output.finished) break;
    }
    context_.metrics->record_request(endpoint_, 200);
    co_return co_await end_stream(join(builder.finish_stream()));
  }

  asio::awaitable<bool> send_headers() {
    response_started_ = true;
    http::response<http::empty_body> response{http::status::ok, request_.version()};
    response.set(http::field::server, "deepinfer");
    response.set(http::field::content_type, "text/event-stream");
    response.set(http::field::cache_control, "no-cache");
    response.keep_alive(request_.keep_alive());
    response.chunked(true);
    http::response_serializer<http::empty_body> serializer{response};
    stream_.expires_after(write_timeout());
    auto [error, bytes] = co_await http::async_write_header(stream_, serializer, kTuple);
    co_return !error;
  }

  TcpStream& stream_;
  const HttpRequest& request_;
  ApiKind kind_;
  ServerContext& context_;
  std::string endpoint_;
  std::string grammar_field_;  // the request field whose grammar constrains it
  bool response_started_ = false;
};

}  // namespace

asio::awaitable<std::variant<ApiRequest, ApiError>> parse_generation_request(const HttpRequest& request, ApiKind kind,
                                                                             const ServerContext& context,
                                                                             std::string* fetched_body) {
  auto body = parse_json_body(kind, request.body());
  if (ApiError* error = std::get_if<ApiError>(&body)) co_return std::move(*error);
  Json& json = std::get<Json>(body);
  if (context.model.images.allow_urls) {
    auto fetched = co_await inline_image_urls(kind, json, context.model, context.config.max_body_bytes);
    if (auto* error = std::get_if<ApiError>(&fetched)) co_return std::move(*error);
    if (std::get<bool>(fetched) && fetched_body != nullptr) *fetched_body = json.dump();
  }
  ModelContext model = context.model;
  model.max_model_len = served_max_model_len(context);
  co_return parse_api_request(kind, json, model);
}

asio::awaitable<bool> handle_generation(TcpStream& stream, const HttpRequest& request, ApiKind kind,
                                        ServerContext& context,
                                        std::optional<std::variant<ApiRequest, ApiError>> parsed) {
  GenerationHandler handler(stream, request, kind, context);
  std::string failure;
  try {
    if (!parsed) parsed = co_await parse_generation_request(request, kind, context);
    co_return co_await handler.run(std::move(*parsed));
  } catch (const std::exception& e) {
    failure = e.what();
  }
  // A bug on one request answers 500 (or ends its stream) and never takes the server down.
  DI_LOG(kError, endpoint_name(kind) << ": internal error: " << failure);
  if (handler.response_started()) co_return false;
  context.metrics->record_request(endpoint_name(kind), 500);
  co_return co_await write_response(
      stream, make_error_response(request, kind, api_error(kind, 500, "internal error: " + failure)),
      context.config.write_timeout_s);
}

}  // namespace deepinfer::server
