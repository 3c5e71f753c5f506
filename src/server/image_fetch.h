// serve --allow-image-urls: the http(s) image URLs of a generation request, fetched by the server
// before the request is parsed and put in its body as data: URLs, so the API parser reads them as
// images sent inline (recipe/api.h, remote_image_urls). HTTP/1.1 GET; https verifies the peer
// against the system's CA store and the URL's host name; up to kMaxImageRedirects redirects (none from https to http);
// only a 200 within the time and size limits counts. Every failure is a 400 naming the part, the URL and the problem.
// The server fetches whatever URL a client names, hosts on its own network included: give the flag only where the
// clients are trusted with that.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/result.h"
#include "recipe/api.h"

namespace deepinfer::server {

struct ImageFetchLimits {
  int64_t max_bytes = 8 << 20;  // one file's bytes
  double timeout_s = 10.0;      // per URL, from the name lookup to the last byte (redirects included)
};

inline constexpr int32_t kMaxImageRedirects = 3;

// The file at url (http:// or https://). Errors say what failed: "HTTP 404 Not Found", "cannot
// connect to example.com:80: Connection refused", "the file is over 8388608 bytes", ...
boost::asio::awaitable<Result<std::vector<uint8_t>>> fetch_image_url(std::string url, ImageFetchLimits limits);

// Each of body's http(s) image URLs (in order) replaced by the fetched file as a data: URL (the
// file's magic bytes decide its type), the body as serialised again (as it would be relayed)
// growing to at most max_body_bytes; a 400 naming the part when one cannot be fetched or does not
// fit, or for what remote_image_urls refuses. Returns whether any URL was replaced.
boost::asio::awaitable<std::variant<bool, ApiError>> inline_image_urls(ApiKind kind, nlohmann::ordered_json& body,
                                                                       const ModelContext& model,
                                                                       int64_t max_body_bytes);

}  // namespace deepinfer::server
