// Image URL fetching with Boost.Beast (plain TCP or OpenSSL TLS), every step bounded by one deadline.
#include "server/image_fetch.h"

#include <openssl/ssl.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
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
#include <variant>

#include "core/base64.h"

namespace deepinfer::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using asio::experimental::awaitable_operators::operator||;
using Json = nlohmann::ordered_json;
constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

struct Url {
  bool tls = false;
  std::string authority;  // as written: the Host header
  std::string host;       // without brackets for an IPv6 literal
  std::string port;
  std::string target;  // path and query
};

Result<Url> parse_url(std::string_view text) {
  Url url;
  if (text.starts_with("https://")) {
    url.tls = true;
    text.remove_prefix(8);
  } else if (text.starts_with("http://")) {
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

// A redirect's Location against the URL it came from: absolute, scheme-relative or a path.
std::string resolve_location(const Url& from, std::string_view location) {
  if (location.starts_with("http://") || location.starts_with("https://")) return std::string(location);
  const std::string scheme = from.tls ? "https:" : "http:";
  if (location.starts_with("//")) return scheme + std::string(location);
  if (location.starts_with("/")) return scheme + "//" + from.authority + std::string(location);
  const std::string base = from.target.substr(0, from.target.rfind('/') + 1);
  return scheme + "//" + from.authority + base + std::string(location);
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
  auto executor = co_await asio::this_coro::executor;
  asio::ip::tcp::resolver resolver(executor);
  asio::steady_timer timer(executor, deadline);
  auto resolved = co_await (resolver.async_resolve(url.host, url.port, kTuple) || timer.async_wait(kTuple));
  if (resolved.index() == 1)
    co_return Error{"no answer within " + std::to_string(static_cast<int>(limits.timeout_s)) + " s (looking up " +
                    url.host + ")"};
  auto [resolve_error, endpoints] = std::get<0>(std::move(resolved));
  if (resolve_error) co_return Error{"cannot resolve " + url.host + ": " + resolve_error.message()};
  beast::tcp_stream tcp(executor);
  tcp.expires_at(deadline);
  auto [connect_error, endpoint] = co_await tcp.async_connect(endpoints, kTuple);
  (void)endpoint;
  if (connect_error) {
    co_return Error{"cannot connect to " + url.authority + ": " + describe(connect_error, limits)};
  }
  if (!url.tls) co_return co_await exchange(tcp, url, limits);
  ssl::context context(ssl::context::tls_client);
  context.set_default_verify_paths();
  context.set_verify_mode(ssl::verify_peer);
  beast::ssl_stream<beast::tcp_stream> stream(std::move(tcp), context);
  stream.set_verify_callback(ssl::host_name_verification(url.host));
  if (SSL_set_tlsext_host_name(stream.native_handle(), url.host.c_str()) != 1) {
    co_return Error{"TLS: cannot send the host name " + url.host};
  }
  auto [handshake_error] = co_await stream.async_handshake(ssl::stream_base::client, kTuple);
  if (handshake_error) co_return Error{"TLS with " + url.authority + ": " + describe(handshake_error, limits)};
  co_return co_await exchange(stream, url, limits);
}

}  // namespace

asio::awaitable<Result<FetchedImage>> fetch_image_url(std::string url, ImageFetchLimits limits) {
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
      continue;
    }
    if (status != 200) {
      co_return Error{"HTTP " + std::to_string(status) + " " + std::string(response->reason())};
    }
    co_return FetchedImage{std::move(response->body()), std::string((*response)[http::field::content_type])};
  }
}

asio::awaitable<std::optional<ApiError>> inline_image_urls(ApiKind kind, Json& body, const ModelContext& model,
                                                           ImageFetchLimits limits) {
  auto found = remote_image_urls(kind, body, model);
  if (auto* e = std::get_if<ApiError>(&found)) co_return *e;
  for (const RemoteImageUrl& remote : std::get<std::vector<RemoteImageUrl>>(found)) {
    auto fetched = co_await fetch_image_url(remote.url, limits);
    if (!fetched.ok()) {
      co_return ApiError{400, "invalid_request_error", remote.path,
                         remote.path + ": fetching " + remote.url + ": " + fetched.error().message};
    }
    // "image/png; charset=..." declares image/png; anything not an image type declares nothing.
    std::string media_type = fetched->content_type.substr(0, fetched->content_type.find(';'));
    if (!media_type.starts_with("image/")) media_type.clear();
    body[Json::json_pointer(remote.pointer)] = "data:" + media_type + ";base64," + encode_base64(fetched->bytes);
  }
  co_return std::nullopt;
}

}  // namespace deepinfer::server
