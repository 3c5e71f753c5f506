// Image URL fetching with Boost.Beast (plain TCP or OpenSSL TLS), every step bounded by one deadline.
#include "server/image_fetch.h"

#include <openssl/ssl.h>

#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/version.hpp>
#include <charconv>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <variant>

#include "core/base64.h"

namespace deepinfer::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using Json = nlohmann::ordered_json;
constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

struct Url {
  bool tls = false;
  std::string authority;  // as written: the Host header
  std::string host;       // without brackets for an IPv6 literal
  std::string port;
  std::string target;  // path and query
};

// Whether text begins with prefix (ASCII letters in any case).
bool starts_with_nocase(std::string_view text, std::string_view prefix) {
  return text.size() >= prefix.size() && beast::iequals(text.substr(0, prefix.size()), prefix);
}

Result<Url> parse_url(std::string_view text) {
  // The URL goes into the request line and the Host header as written: no space, control or
  // non-ASCII byte may (they would let a URL write its own header lines).
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte <= 0x20 || byte >= 0x7f) {
      return Error{"the URL holds a space, control or non-ASCII byte (percent-encode it)"};
    }
  }
  Url url;
  if (starts_with_nocase(text, "https://")) {
    url.tls = true;
    text.remove_prefix(8);
  } else if (starts_with_nocase(text, "http://")) {
    text.remove_prefix(7);
  } else {
    return Error{"only http:// and https:// URLs are fetched"};
  }
  const size_t authority_end = text.find_first_of("/?#");
  url.authority = std::string(text.substr(0, authority_end));
  std::string_view rest = authority_end == std::string_view::npos ? std::string_view() : text.substr(authority_end);
  rest = rest.substr(0, rest.find('#'));
  url.target = rest.empty() || rest.front() != '/' ? "/" + std::string(rest) : std::string(rest);
  if (url.authority.find('@') != std::string::npos) return Error{"URLs with user information are not fetched"};
  std::string_view authority = url.authority;
  std::string_view port;
  if (authority.starts_with("[")) {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return Error{"malformed IPv6 address in the URL"};
    url.host = std::string(authority.substr(1, close - 1));
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') return Error{"malformed host in the URL"};
      port = authority.substr(close + 2);
    }
  } else {
    const size_t colon = authority.rfind(':');
    url.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (url.host.empty()) return Error{"the URL has no host"};
  int number = 0;
  if (!port.empty()) {
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), number);
    if (ec != std::errc() || end != port.data() + port.size() || number < 1 || number > 65535) {
      return Error{"the URL's port '" + std::string(port) + "' is not a number from 1 to 65535"};
    }
  }
  url.port = port.empty() ? (url.tls ? "443" : "80") : std::string(port);
  return url;
}

// A redirect's Location against the URL it came from: absolute (any scheme, which parse_url then
// judges), scheme-relative, an absolute path, a query, or a path relative to the directory.
std::string resolve_location(const Url& from, std::string_view location) {
  const size_t colon = location.find(':');
  if (colon != std::string_view::npos && location.find_first_of("/?#") > colon) return std::string(location);
  const std::string scheme = from.tls ? "https:" : "http:";
  if (location.starts_with("//")) return scheme + std::string(location);
  if (location.starts_with("/")) return scheme + "//" + from.authority + std::string(location);
  const std::string path = from.target.substr(0, from.target.find('?'));
  if (location.starts_with("?")) return scheme + "//" + from.authority + path + std::string(location);
  return scheme + "//" + from.authority + path.substr(0, path.rfind('/') + 1) + std::string(location);
}

// One TLS context for every fetch (the CA store read once); an Error when the store cannot be read.
Result<ssl::context*> tls_context() {
  static const auto context = [] {
    auto made = std::make_unique<ssl::context>(ssl::context::tls_client);
    boost::system::error_code ec;
    made->set_default_verify_paths(ec);
    made->set_verify_mode(ssl::verify_peer);
    return std::make_pair(std::move(made), ec);
  }();
  if (context.second) return Error{"TLS: the system's CA certificates cannot be read: " + context.second.message()};
  return context.first.get();
}

// Name lookups in flight at once (each on a thread of its own); more are refused.
constexpr int32_t kMaxLookups = 64;
std::atomic<int32_t> lookups_in_flight{0};

// The host's addresses, looked up on a thread of its own so that the deadline bounds the wait (a
// name lookup cannot be cancelled) and a slow name server holds up no other lookup. The thread
// touches no object of the server's event loop (which may be gone before a lookup returns): it
// leaves its answer in the shared state, which the coroutine checks every few milliseconds.
asio::awaitable<Result<asio::ip::tcp::resolver::results_type>> look_up(const Url& url,
                                                                       std::chrono::steady_clock::time_point deadline) {
  struct Lookup {
    std::mutex mutex;
    bool done = false;
    boost::system::error_code ec;
    asio::ip::tcp::resolver::results_type results;
  };
  if (lookups_in_flight.fetch_add(1) >= kMaxLookups) {
    lookups_in_flight.fetch_sub(1);
    co_return Error{"too many image URL lookups in flight (" + std::to_string(kMaxLookups) + "); try again"};
  }
  auto lookup = std::make_shared<Lookup>();
  std::thread([lookup, host = url.host, port = url.port] {
    asio::io_context local;
    asio::ip::tcp::resolver resolver(local);
    boost::system::error_code ec;
    auto results = resolver.resolve(host, port, ec);
    lookups_in_flight.fetch_sub(1);
    const std::lock_guard lock(lookup->mutex);
    lookup->done = true;
    lookup->ec = ec;
    lookup->results = std::move(results);
  }).detach();
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (;;) {
    {
      const std::lock_guard lock(lookup->mutex);
      if (lookup->done) break;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      co_return Error{"no answer within the time limit (looking up " + url.host + ")"};
    }
    timer.expires_after(std::chrono::milliseconds(5));
    co_await timer.async_wait(kTuple);
  }
  const std::lock_guard lock(lookup->mutex);
  if (lookup->ec) co_return Error{"cannot resolve " + url.host + ": " + lookup->ec.message()};
  co_return lookup->results;
}

using Response = http::response<http::vector_body<uint8_t>>;

std::string describe(const boost::system::error_code& ec, const ImageFetchLimits& limits) {
  if (ec == beast::error::timeout || ec == asio::error::operation_aborted) {
    return "no answer within " + std::to_string(static_cast<int>(limits.timeout_s)) + " s";
  }
  if (ec == http::error::body_limit) {
    return "the file is over " + std::to_string(limits.max_bytes) + " bytes (--max-body-bytes)";
  }
  return ec.message();
}

// One GET over a connected stream (TCP, or TLS after its handshake).
template <typename Stream>
asio::awaitable<Result<Response>> exchange(Stream& stream, const Url& url, const ImageFetchLimits& limits) {
  http::request<http::empty_body> request{http::verb::get, url.target, 11};
  request.set(http::field::host, url.authority);
  request.set(http::field::user_agent, "deepinfer");
  request.set(http::field::accept, "image/*");
  auto [write_error, written] = co_await http::async_write(stream, request, kTuple);
  (void)written;
  if (write_error) co_return Error{describe(write_error, limits)};
  beast::flat_buffer buffer;
  http::response_parser<http::vector_body<uint8_t>> parser;
  parser.body_limit(static_cast<uint64_t>(limits.max_bytes));
  auto [read_error, read] = co_await http::async_read(stream, buffer, parser, kTuple);
  (void)read;
  if (read_error) co_return Error{describe(read_error, limits)};
  co_return parser.release();
}

asio::awaitable<Result<Response>> get(const Url& url, const ImageFetchLimits& limits,
                                      std::chrono::steady_clock::time_point deadline) {
  auto endpoints = co_await look_up(url, deadline);
  if (!endpoints.ok()) co_return endpoints.error();
  beast::tcp_stream tcp(co_await asio::this_coro::executor);
  tcp.expires_at(deadline);
  auto [connect_error, endpoint] = co_await tcp.async_connect(*endpoints, kTuple);
  (void)endpoint;
  if (connect_error) {
    co_return Error{"cannot connect to " + url.authority + ": " + describe(connect_error, limits)};
  }
  if (!url.tls) co_return co_await exchange(tcp, url, limits);
  auto context = tls_context();
  if (!context.ok()) co_return context.error();
  beast::ssl_stream<beast::tcp_stream> stream(std::move(tcp), **context);
  stream.set_verify_callback(ssl::host_name_verification(url.host));
  // Server Name Indication names hosts, never address literals (RFC 6066).
  boost::system::error_code not_an_address;
  asio::ip::make_address(url.host, not_an_address);
  if (not_an_address && SSL_set_tlsext_host_name(stream.native_handle(), url.host.c_str()) != 1) {
    co_return Error{"TLS: cannot send the host name " + url.host};
  }
  auto [handshake_error] = co_await stream.async_handshake(ssl::stream_base::client, kTuple);
  if (handshake_error) co_return Error{"TLS with " + url.authority + ": " + describe(handshake_error, limits)};
  co_return co_await exchange(stream, url, limits);
}

}  // namespace

asio::awaitable<Result<std::vector<uint8_t>>> fetch_image_url(std::string url, ImageFetchLimits limits) {
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(limits.timeout_s));
  for (int32_t redirects = 0;; ++redirects) {
    auto parsed = parse_url(url);
    if (!parsed.ok()) co_return parsed.error();
    auto response = co_await get(*parsed, limits, deadline);
    if (!response.ok()) co_return response.error();
    const unsigned status = response->result_int();
    if (status == 301 || status == 302 || status == 303 || status == 307 || status == 308) {
      const auto location = response->find(http::field::location);
      if (location == response->end()) co_return Error{"HTTP " + std::to_string(status) + " without a Location"};
      if (redirects == kMaxImageRedirects) {
        co_return Error{"more than " + std::to_string(kMaxImageRedirects) + " redirects"};
      }
      url = resolve_location(*parsed, location->value());
      if (parsed->tls && !starts_with_nocase(url, "https://")) {
        co_return Error{"a redirect from https to " + url + " (refused: it would drop TLS)"};
      }
      continue;
    }
    if (status != 200) {
      co_return Error{"HTTP " + std::to_string(status) + " " + std::string(response->reason())};
    }
    co_return std::move(response->body());
  }
}

asio::awaitable<std::variant<bool, ApiError>> inline_image_urls(ApiKind kind, Json& body, const ModelContext& model,
                                                                int64_t max_body_bytes) {
  auto found = remote_image_urls(kind, body, model);
  if (auto* e = std::get_if<ApiError>(&found)) co_return *e;
  const auto& urls = std::get<std::vector<RemoteImageUrl>>(found);
  // Each file goes in as base64 (4 bytes for 3) in place of its URL; the file's magic bytes decide
  // its type (a Content-Type the client did not write is no declaration of the client's).
  const std::string prefix = "data:;base64,";
  if (urls.empty()) co_return false;
  int64_t room = max_body_bytes - static_cast<int64_t>(body.dump().size());
  for (const RemoteImageUrl& remote : urls) {
    const auto fail = [&](const std::string& message) {
      return ApiError{400, "invalid_request_error", remote.path,
                      remote.path + ": fetching " + remote.url + ": " + message};
    };
    const int64_t base64_room = room + static_cast<int64_t>(remote.url.size()) - static_cast<int64_t>(prefix.size());
    const std::string over = "the request with its images is over " + std::to_string(max_body_bytes) +
                             " bytes, the files as base64 (--max-body-bytes)";
    if (base64_room < 4) co_return fail(over);
    auto fetched = co_await fetch_image_url(remote.url, ImageFetchLimits{base64_room / 4 * 3});
    if (!fetched.ok()) {
      co_return fail(fetched.error().message.starts_with("the file is over") ? over : fetched.error().message);
    }
    std::string data_url = prefix + encode_base64(*fetched);
    room -= static_cast<int64_t>(data_url.size()) - static_cast<int64_t>(remote.url.size());
    body[Json::json_pointer(remote.pointer)] = std::move(data_url);
  }
  co_return true;
}

}  // namespace deepinfer::server
