// The web playground: GET / answers the page (src/server/ui/index.html) and GET /ui/<file> its
// modules and styles, all compiled into the binary. It is a function of the request alone, so any
// HTTP front of this layer (`deepinfer serve`, a router) mounts it the same way; the page calls
// the server's own API (/v1/models, /v1/chat/completions, /metrics), with the API key the user
// types when the server has one.
#pragma once

#include <boost/beast/http.hpp>
#include <string_view>

namespace deepinfer::server {

// True for the paths the playground answers: "/" and everything under "/ui/" (query excluded).
bool is_playground_path(std::string_view path);

// A playground path's response: 200 with the file, its content type, ETag and Cache-Control:
// no-cache (the browser revalidates, so a new binary's files are seen at once), or 304 when
// If-None-Match names the ETag; 404 for a name that is not embedded (so no path, "../" included,
// ever reaches the file system); 405 for a method other than GET.
boost::beast::http::response<boost::beast::http::string_body> serve_playground(
    const boost::beast::http::request<boost::beast::http::string_body>& request);

}  // namespace deepinfer::server
