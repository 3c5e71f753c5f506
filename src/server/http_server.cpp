// Connection handling and routing of the HTTP server.
#include "server/http_server.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <chrono>
#include <string_view>
#include <thread>
#include <vector>

#include "core/check.h"
#include "core/logging.h"
#include "server/encode_api.h"
#include "server/image_encoder_service.h"
#include "server/playground.h"
#include "server/rank_router.h"
#include "server/token_api.h"

namespace deepinfer::server {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

// A coroutine's completion handler: an exception that escaped it is logged, where
// asio::detached would rethrow it from io_context::run and end the process.
auto log_failure(const char* what) {
  return [what](const std::exception_ptr& failure) {
    if (!failure) return;
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      DI_LOG(kError, what << " failed: " << e.what());
    } catch (...) {
      DI_LOG(kError, what << " failed");
    }
  };
}

struct Route {
  std::string_view path;
  http::verb method;
  std::optional<ApiKind> api;  // a generation endpoint
  bool needs_key;              // behind --api-key
};

constexpr Route kRoutes[] = {
    {"/v1/chat/completions", http::verb::post, ApiKind::kChatCompletions, true},
    {"/v1/completions", http::verb::post, ApiKind::kCompletions, true},
    {"/v1/responses", http::verb::post, ApiKind::kResponses, true},
    {"/v1/messages", http::verb::post, ApiKind::kMessages, true},
    {"/v1/models", http::verb::get, std::nullopt, true},
    {"/tokenize", http::verb::post, std::nullopt, true},
    {"/detokenize", http::verb::post, std::nullopt, true},
    {kTokenApiPath, http::verb::post, std::nullopt, true},   // a cluster router's requests (token_api.h)
    {kEncodeApiPath, http::verb::post, std::nullopt, true},  // an image encoder's (encode_api.h)
    {"/health", http::verb::get, std::nullopt, false},
    {"/metrics", http::verb::get, std::nullopt, false},
};

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

// Compares without an early exit, so response time does not reveal how much of a key matched.
bool same_key(std::string_view given, std::string_view expected) {
  unsigned diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i) diff |= static_cast<unsigned>(given[i] ^ expected[i % expected.size()]);
  return diff == 0;
}

bool authorized(const HttpRequest& request, const ServerConfig& config) {
  if (!config.api_key || config.api_key->empty()) return true;
  const std::string_view bearer = request[http::field::authorization];
  if (bearer.starts_with("Bearer ") && same_key(bearer.substr(7), *config.api_key)) return true;
  return same_key(request["x-api-key"], *config.api_key);
}

// The front of a data-parallel server: the least-loaded rank runs the request, rank 0 (this
// process) on its own worker, another rank through a relay to its HTTP server.
asio::awaitable<bool> route_to_rank(TcpStream& stream, const HttpRequest& request, ApiKind kind,
                                    ServerContext& context) {
  struct Outstanding {
    RankRouter& router;
    int64_t tokens;
    int32_t rank;
    ~Outstanding() { router.release(rank, tokens); }
  };
  // Parsed once here: its prompt tokens weigh it and name its blocks. A request that does not parse
  // gets its error from rank 0, and one whose parse fails on a bug gets rank 0's 500.
  std::optional<std::variant<ApiRequest, ApiError>> parsed;
  std::string fetched_body;  // the body with its image URLs fetched, which the rank then need not fetch
  try {
    parsed = co_await parse_generation_request(request, kind, context, &fetched_body);
  } catch (const std::exception&) {
  }
  const ApiRequest* api = parsed ? std::get_if<ApiRequest>(&*parsed) : nullptr;
  if (api == nullptr) co_return co_await handle_generation(stream, request, kind, context, std::move(parsed));
  const bool affinity = context.router->options().routing == RankRouting::kPrefixAffinity;
  const RoutedRequest routed =
      routed_request(api->prompt_token_ids, api->sampling, context.model.served_name, api->cache_salt,
                     affinity ? context.router->options().block_size : 0, api->images);
  const Outstanding outstanding{*context.router, routed.tokens, context.router->acquire(routed)};
  if (outstanding.rank == 0) {
    co_return co_await handle_generation(stream, request, kind, context, std::move(parsed));
  }
  if (fetched_body.empty()) {
    co_return co_await relay_to_rank(stream, request, kind, outstanding.rank, context.router->address(outstanding.rank),
                                     context);
  }
  HttpRequest relayed = request;
  relayed.body() = std::move(fetched_body);
  co_return co_await relay_to_rank(stream, relayed, kind, outstanding.rank, context.router->address(outstanding.rank),
                                   context);
}

asio::awaitable<bool> dispatch(TcpStream& stream, const HttpRequest& request, ServerContext& context) {
  std::string_view path = request.target();
  path = path.substr(0, path.find('?'));
  const Route* route = nullptr;
  for (const Route& r : kRoutes) {
    if (r.path == path) route = &r;
  }
  const double timeout_s = context.config.write_timeout_s;
  if (route == nullptr && is_playground_path(path) && context.config.ui) {
    HttpResponse response = serve_playground(request);
    context.metrics->record_request("/ui", static_cast<int>(response.result_int()));
    co_return co_await write_response(stream, std::move(response), timeout_s);
  }
  if (route == nullptr) {
    context.metrics->record_request("other", 404);
    std::string message = "no route for " + std::string(path);
    if (is_playground_path(path)) message += "; the web playground is served with --ui";
    const ApiError error{404, "not_found_error", "", std::move(message)};
    co_return co_await write_response(stream, make_error_response(request, ApiKind::kChatCompletions, error), timeout_s);
  }
  const ApiKind kind = route->api.value_or(ApiKind::kChatCompletions);
  if (request.method() != route->method) {
    context.metrics->record_request(std::string(route->path), 405);
    const std::string allowed(http::to_string(route->method));
    HttpResponse response = make_error_response(
        request, kind, api_error(kind, 405, "method " + std::string(request.method_string()) + " is not allowed on " +
                                                std::string(path) + "; use " + allowed));
    response.set(http::field::allow, allowed);
    co_return co_await write_response(stream, std::move(response), timeout_s);
  }
  if (route->needs_key && !authorized(request, context.config)) {
    context.metrics->record_request(std::string(route->path), 401);
    const ApiError error = api_error(kind, 401, "invalid API key: send it as 'Authorization: Bearer KEY' or 'x-api-key: KEY'");
    co_return co_await write_response(stream, make_error_response(request, kind, error), timeout_s);
  }
  const bool encoder_route = route->path == kEncodeApiPath || route->path == "/health" || route->path == "/metrics";
  if ((context.encoder != nullptr) != encoder_route && (context.encoder != nullptr || route->path == kEncodeApiPath)) {
    context.metrics->record_request(std::string(route->path), 404);
    const std::string message =
        context.encoder != nullptr
            ? "this server is an image encoder (serve --role encoder): it answers " + std::string(kEncodeApiPath) +
                  ", /health and /metrics; send requests to a router or a worker"
            : std::string(kEncodeApiPath) + " is served by image encoders (serve --role encoder)";
    const ApiError error{404, "not_found_error", "", message};
    co_return co_await write_response(stream, make_error_response(request, kind, error), timeout_s);
  }
  if (route->path == kEncodeApiPath) co_return co_await handle_image_encoding(stream, request, context);
  if (route->path == kTokenApiPath) co_return co_await handle_token_generation(stream, request, context);
  if (route->api && context.router != nullptr) co_return co_await route_to_rank(stream, request, *route->api, context);
  if (route->api) co_return co_await handle_generation(stream, request, *route->api, context);
  std::optional<HttpResponse> response;
  try {
    response = handle_info_route(request, context);
  } catch (const std::exception& e) {
    DI_LOG(kError, path << ": internal error: " << e.what());
    response = make_error_response(request, kind, api_error(kind, 500, std::string("internal error: ") + e.what()));
  }
  DI_CHECK(response.has_value());
  context.metrics->record_request(std::string(route->path), static_cast<int>(response->result_int()));
  co_return co_await write_response(stream, std::move(*response), timeout_s);
}

// Counts a connection as busy while a request of it is dispatched.
class BusyConnection {
 public:
  explicit BusyConnection(std::atomic<int32_t>& count) : count_(count) { ++count_; }
  ~BusyConnection() { --count_; }
  BusyConnection(const BusyConnection&) = delete;
  BusyConnection& operator=(const BusyConnection&) = delete;

 private:
  std::atomic<int32_t>& count_;
};

// A response to a request that could not be read whole; the connection closes after it.
asio::awaitable<void> refuse(TcpStream& stream, ServerContext& context, int status, std::string message) {
  HttpRequest request;
  request.version(11);
  HttpResponse response = make_error_response(request, ApiKind::kChatCompletions,
                                              api_error(ApiKind::kChatCompletions, status, std::move(message)));
  response.keep_alive(false);
  context.metrics->record_request("other", status);
  co_await write_response(stream, std::move(response), context.config.write_timeout_s);
}

asio::awaitable<void> serve_connection(TcpStream stream, ServerContext& context) {
  const ServerConfig& config = context.config;
  boost::beast::flat_buffer buffer;
  for (;;) {
    http::request_parser<http::string_body> parser;
    // The larger of the two limits until the target is known (a header's Content-Length is checked
    // against it as it is read), then the route's.
    parser.body_limit(static_cast<uint64_t>(std::max(config.max_body_bytes, config.max_internal_body_bytes)));
    stream.expires_after(seconds(config.idle_timeout_s));
    auto [header_error, header_bytes] = co_await http::async_read_header(stream, buffer, parser, kTuple);
    // The internal routes' larger limit only where they are served (not on a router) and, behind an
    // API key, only for a caller that sent it.
    const bool internal = std::string_view(parser.get().target()).starts_with("/internal/") &&
                          context.cluster == nullptr && authorized(parser.get(), config);
    const int64_t limit = internal ? config.max_internal_body_bytes : config.max_body_bytes;
    const std::string too_large = "request body is over the limit of " + std::to_string(limit) + " bytes (" +
                                  (internal ? "--max-internal-body-bytes" : "--max-body-bytes") + ")";
    if (!header_error && parser.content_length() && *parser.content_length() > static_cast<uint64_t>(limit)) {
      header_error = http::error::body_limit;
    }
    if (!header_error) parser.body_limit(static_cast<uint64_t>(limit));
    if (header_error == http::error::body_limit) {
      co_await refuse(stream, context, 413, too_large);
      break;
    }
    if (header_error == http::error::end_of_stream || header_error == asio::error::eof ||
        header_error == boost::beast::error::timeout || header_error == asio::error::connection_reset ||
        header_error == asio::error::operation_aborted) {
      break;
    }
    if (header_error) {
      co_await refuse(stream, context, 400, "malformed HTTP request: " + header_error.message());
      break;
    }
    if (boost::beast::iequals(parser.get()[http::field::expect], "100-continue")) {
      http::response<http::empty_body> go_on{http::status::continue_, parser.get().version()};
      auto [continue_error, n] = co_await http::async_write(stream, go_on, kTuple);
      if (continue_error) break;
    }
    stream.expires_after(seconds(config.idle_timeout_s));
    auto [body_error, body_bytes] = co_await http::async_read(stream, buffer, parser, kTuple);
    if (body_error == http::error::body_limit) {
      co_await refuse(stream, context, 413, too_large);
      break;
    }
    if (body_error) {
      if (body_error != asio::error::eof && body_error != http::error::end_of_stream &&
          body_error != boost::beast::error::timeout) {
        co_await refuse(stream, context, 400, "malformed HTTP request body: " + body_error.message());
      }
      break;
    }
    stream.expires_never();
    HttpRequest request = parser.release();
    const bool keep_alive = request.keep_alive();
    bool open = false;
    {
      const BusyConnection busy(context.num_busy_connections);
      open = co_await dispatch(stream, request, context);
    }
    if (!open || !keep_alive || context.shutdown->begun()) break;
  }
  boost::system::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
}

asio::awaitable<void> accept_loop(tcp::acceptor& acceptor, ServerContext& context) {
  for (;;) {
    auto [error, socket] = co_await acceptor.async_accept(asio::make_strand(acceptor.get_executor()), kTuple);
    if (error == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    if (error) continue;  // e.g. out of file descriptors: keep serving the others
    socket.set_option(tcp::no_delay(true), error);
    auto executor = socket.get_executor();
    asio::co_spawn(executor, serve_connection(TcpStream(std::move(socket)), context), log_failure("a connection"));
  }
}

}  // namespace

HttpServer::HttpServer(ServerContext& context)
    : context_(context), accept_strand_(asio::make_strand(io_)), acceptor_(io_), signals_(io_, SIGINT, SIGTERM) {}

HttpServer::~HttpServer() = default;

Result<uint16_t> HttpServer::listen() {
  boost::system::error_code error;
  const auto address = asio::ip::make_address(context_.config.host, error);
  if (error) return Error{"--host '" + context_.config.host + "' is not an IP address: " + error.message()};
  const tcp::endpoint endpoint(address, context_.config.port);
  acceptor_.open(endpoint.protocol(), error);
  if (!error) acceptor_.set_option(tcp::acceptor::reuse_address(true), error);
  if (!error) acceptor_.bind(endpoint, error);
  if (!error) acceptor_.listen(asio::socket_base::max_listen_connections, error);
  if (error) {
    return Error{"cannot listen on " + context_.config.host + ":" + std::to_string(context_.config.port) + ": " +
                 error.message()};
  }
  return acceptor_.local_endpoint().port();
}

void HttpServer::run() {
  signals_.async_wait([this](const boost::system::error_code& error, int signal_number) {
    if (!error) begin_shutdown(signal_number == SIGINT ? "SIGINT" : "SIGTERM");
  });
  asio::co_spawn(accept_strand_, accept_loop(acceptor_, context_), log_failure("the accept loop"));
  std::vector<std::thread> threads;
  for (int32_t i = 1; i < context_.config.num_io_threads; ++i) threads.emplace_back([this] { io_.run(); });
  io_.run();
  for (std::thread& thread : threads) thread.join();
}

void HttpServer::begin_shutdown(const char* signal_name) {
  boost::system::error_code ignored;
  signals_.clear(ignored);  // the default action again: a second signal ends the process at once
  context_.shutdown->begin();
  DI_LOG(kWarn, signal_name << ": shutting down within " << context_.shutdown->timeout_s()
                            << " s (--shutdown-timeout)");
  // On the accept loop's strand: the acceptor is not thread-safe.
  asio::post(accept_strand_, [this] {
    boost::system::error_code error;
    acceptor_.close(error);
  });
  if (context_.encoder != nullptr) {
    context_.encoder->shutdown("the server is shutting down");
  } else {
    context_.worker->shutdown("the server is shutting down");
  }
  asio::co_spawn(io_, close_connections(), log_failure("the shutdown"));
}

asio::awaitable<void> HttpServer::close_connections() {
  const auto deadline = context_.shutdown->at_fraction(0.5);
  asio::steady_timer poll(io_);
  while (context_.num_busy_connections > 0 && std::chrono::steady_clock::now() < deadline) {
    poll.expires_after(std::chrono::milliseconds(10));
    co_await poll.async_wait(asio::use_awaitable);
  }
  if (context_.num_busy_connections > 0) {
    DI_LOG(kWarn, "shutdown: closing " << context_.num_busy_connections
                                       << " connections still writing their last response");
  }
  context_.shutdown->set_stage("stopping the connections");
  io_.stop();
}

}  // namespace deepinfer::server
