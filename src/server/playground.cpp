#include "server/playground.h"

#include <string>

#include "server/embedded_files.h"

namespace deepinfer::server {
namespace {

namespace http = boost::beast::http;
using Response = http::response<http::string_body>;

constexpr std::string_view kIndex = "index.html";
constexpr std::string_view kAssetPrefix = "/ui/";

// The page runs only its own scripts and styles and talks only to this server: model output is
// inserted as text, and the policy stops anything that slips through from loading or sending.
constexpr const char* kContentSecurityPolicy =
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'none'";

std::string_view without_query(std::string_view target) { return target.substr(0, target.find('?')); }

Response plain(const http::request<http::string_body>& request, http::status status, std::string body) {
  Response response{status, request.version()};
  response.set(http::field::server, "deepinfer");
  response.set(http::field::content_type, "text/plain; charset=utf-8");
  response.set("X-Content-Type-Options", "nosniff");  // the body echoes the path: never read as HTML
  response.keep_alive(request.keep_alive());
  response.body() = std::move(body);
  response.prepare_payload();
  return response;
}

const EmbeddedFile* find_file(std::string_view name) {
  for (const EmbeddedFile& file : playground_files()) {
    if (file.path == name) return &file;
  }
  return nullptr;
}

// If-None-Match holds "*" or a comma-separated list of (possibly weak, W/"...") tags.
bool etag_matches(std::string_view if_none_match, std::string_view etag) {
  while (!if_none_match.empty()) {
    const size_t comma = if_none_match.find(',');
    std::string_view tag = if_none_match.substr(0, comma);
    while (!tag.empty() && tag.front() == ' ') tag.remove_prefix(1);
    while (!tag.empty() && tag.back() == ' ') tag.remove_suffix(1);
    if (tag.starts_with("W/")) tag.remove_prefix(2);
    if (tag == "*" || tag == etag) return true;
    if (comma == std::string_view::npos) break;
    if_none_match.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace

bool is_playground_path(std::string_view path) { return path == "/" || path.starts_with(kAssetPrefix); }

Response serve_playground(const http::request<http::string_body>& request) {
  const std::string_view path = without_query(request.target());
  if (request.method() != http::verb::get) {
    Response response = plain(
        request, http::status::method_not_allowed,
        "method " + std::string(request.method_string()) + " is not allowed on " + std::string(path) + "; use GET\n");
    response.set(http::field::allow, "GET");
    return response;
  }
  const std::string_view name = path == "/" ? kIndex : path.substr(kAssetPrefix.size());
  const EmbeddedFile* file = find_file(name);
  if (file == nullptr) return plain(request, http::status::not_found, "no playground file " + std::string(path) + "\n");
  const bool not_modified = etag_matches(request[http::field::if_none_match], file->etag);
  Response response{not_modified ? http::status::not_modified : http::status::ok, request.version()};
  response.set(http::field::server, "deepinfer");
  response.set(http::field::etag, file->etag);
  response.set(http::field::cache_control, "no-cache");
  response.set("X-Content-Type-Options", "nosniff");
  response.keep_alive(request.keep_alive());
  if (!not_modified) {
    response.set(http::field::content_type, file->content_type);
    if (name == kIndex) {
      response.set("Content-Security-Policy", kContentSecurityPolicy);
      response.set("Referrer-Policy", "no-referrer");
    }
    response.body() = std::string(file->bytes);
  }
  response.prepare_payload();  // a 304 gets no Content-Length: it never has a body
  return response;
}

}  // namespace deepinfer::server
