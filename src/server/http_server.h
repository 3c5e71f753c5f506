// The HTTP/1.1 server: an acceptor and one coroutine per connection (keep-alive, Expect:
// 100-continue, body size limit checked on the headers), run by a few io_context threads; each
// connection lives on its own strand. Routes are in routes.cpp and generation_route.cpp.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/strand.hpp>
#include <cstdint>
#include <memory>

#include "core/result.h"
#include "server/server_context.h"

namespace deepinfer::server {

class HttpServer {
 public:
  // context must outlive the server.
  explicit HttpServer(ServerContext& context);
  ~HttpServer();

  // Binds and listens on context.config.host:port; returns the bound port (port 0 picks one).
  Result<uint16_t> listen();
  // Serves until SIGINT or SIGTERM, then shuts down within context.shutdown's deadline: stops
  // accepting, ends every open request with an error (the worker's shutdown: a 503, or an error
  // event on a stream), gives the connections writing it up to half the timeout, and closes
  // every connection. Returns after every io thread ended. A second signal ends the process at
  // once.
  void run();

 private:
  void begin_shutdown(const char* signal_name);
  boost::asio::awaitable<void> close_connections();

  ServerContext& context_;
  boost::asio::io_context io_;
  boost::asio::strand<boost::asio::io_context::executor_type> accept_strand_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::signal_set signals_;
};

}  // namespace deepinfer::server
