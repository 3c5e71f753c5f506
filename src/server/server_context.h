// What every route of the HTTP server shares: its settings, the served model, the engine thread,
// the metrics and the shutdown's state; plus the Beast types the routes are written in.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <variant>

#include "kvcache/prefix_hash.h"
#include "recipe/api.h"
#include "server/generation_backend.h"
#include "server/metrics.h"
#include "server/shutdown.h"

namespace deepinfer::server {

class RankRouter;      // server/rank_router.h
class WorkerSelector;  // server/worker_selector.h
class EncoderSelector;  // server/encoder_selector.h
class KvTransport;     // server/kv_transport.h
class PrefilledInbox;  // server/prefilled_inbox.h
class ImageEncoderService;  // server/image_encoder_service.h

namespace http = boost::beast::http;
using HttpRequest = http::request<http::string_body>;
using HttpResponse = http::response<http::string_body>;
using TcpStream = boost::beast::tcp_stream;

struct ServerConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;  // 0: any free port (printed on startup)
  std::optional<std::string> api_key;  // required on /v1/*, /tokenize, /detokenize when set
  int32_t max_queued_requests = 256;
  int64_t max_queued_tokens = 1 << 20;
  double request_timeout_s = 600.0;     // from admission to the last token
  int64_t max_body_bytes = 8 << 20;
  // The internal routes' (/internal/*: a router's requests to its workers), whose bodies may carry
  // an image encoder's rows (megabytes an image: encode_api.h).
  int64_t max_internal_body_bytes = int64_t{256} << 20;
  int32_t num_io_threads = 2;
  int32_t stream_buffer_outputs = 1024;  // engine outputs a request may have unsent
  double write_timeout_s = 30.0;         // one write to a client that stopped reading
  double idle_timeout_s = 120.0;         // between requests on a kept-alive connection
  double shutdown_timeout_s = 5.0;       // SIGTERM / SIGINT to exit, whatever is stuck
  bool check_invariants = false;         // EngineCore::check_invariants whenever idle (tests)
  bool ui = false;                       // the web playground at GET / and /ui/* (server/playground.h)
};

struct ServerContext {
  ServerConfig config;
  ModelContext model;
  // Runs the generation requests: the engine thread (serve) or the cluster's workers (router).
  GenerationBackend* worker = nullptr;
  // An image encoder service (serve --role encoder): it answers the encode route, /health and
  // /metrics only, and worker is null.
  ImageEncoderService* encoder = nullptr;
  // A data-parallel server's front (rank 0): sends generation requests to the ranks; null otherwise.
  RankRouter* router = nullptr;
  // A cluster router (deepinfer router): its choice of worker, for /metrics; null otherwise.
  WorkerSelector* cluster = nullptr;
  // A cluster router's image encoders, for /metrics; null otherwise.
  const EncoderSelector* encoders = nullptr;
  Metrics* metrics = nullptr;
  // A disaggregated cluster worker (serve --role prefill|decode, docs/cluster.md). Prefill: sends
  // a prefilled request's KV to its decode worker (push mode), and waits until the persistent
  // store has written the prompt's queued pages (store mode; blocking, thread-safe). Decode: the
  // pushed KV waiting for its request.
  KvTransport* kv_transport = nullptr;
  std::function<void(std::span<const BlockHash>)> wait_kv_written;
  PrefilledInbox* prefilled_inbox = nullptr;
  bool has_kv_store = false;             // the engine has a persistent KV store (--kv-cache-dir / -backend)
  ShutdownDeadline* shutdown = nullptr;  // required; begun by the first SIGTERM / SIGINT
  int64_t started_unix = 0;
  // Connections inside a request (read, its response not yet written): the shutdown lets them
  // send their last frames before it closes every connection.
  std::atomic<int32_t> num_busy_connections{0};
};

// The context length requests are bounded by: a cluster router's is its workers' once one is
// known (WorkerSelector::max_model_len), otherwise the model's own.
int32_t served_max_model_len(const ServerContext& context);

// Reads a request body as JSON: invalid UTF-8 names the byte offset, malformed JSON the line and
// column, a non-object body says so.
std::variant<nlohmann::ordered_json, ApiError> parse_json_body(ApiKind kind, const std::string& body);

// A JSON (or other) response with the request's HTTP version and keep-alive.
HttpResponse make_response(const HttpRequest& request, http::status status, std::string body,
                           const char* content_type = "application/json");
HttpResponse make_error_response(const HttpRequest& request, ApiKind kind, const ApiError& error);

// Writes one whole response; false when the connection failed.
boost::asio::awaitable<bool> write_response(TcpStream& stream, HttpResponse response, double timeout_s);

// A generation request's body, validated and rendered into prompt tokens (its image URLs fetched
// first when the server allows them: server/image_fetch.h; fetched_body, when given, gets the body
// with the fetched files in place of their URLs, left alone when there were none).
boost::asio::awaitable<std::variant<ApiRequest, ApiError>> parse_generation_request(
    const HttpRequest& request, ApiKind kind, const ServerContext& context, std::string* fetched_body = nullptr);

// The generation endpoints (/v1/chat/completions, /v1/completions, /v1/responses, /v1/messages):
// parse (unless parsed is given), admit, stream or collect, answer. Records the request in the
// metrics. Returns false when the connection must close.
boost::asio::awaitable<bool> handle_generation(
    TcpStream& stream, const HttpRequest& request, ApiKind kind, ServerContext& context,
    std::optional<std::variant<ApiRequest, ApiError>> parsed = std::nullopt);

// GET /health (503 with the reason once the device is lost or shutdown began), GET /v1/models,
// GET /metrics, POST /tokenize, POST /detokenize; nullopt for any other path.
std::optional<HttpResponse> handle_info_route(const HttpRequest& request, ServerContext& context);

}  // namespace deepinfer::server
