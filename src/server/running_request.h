// One running request as its connection sees it: the next event from the backend, its deadline
// (--request-timeout), and the client's socket (a client that hangs up cancels the request).
// Shared by the public generation routes and the workers' token-level route.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <memory>

#include "server/server_context.h"

namespace deepinfer::server {

enum class Wait { kEvent, kTimedOut, kDisconnected, kDropped };

class RunningRequest {
 public:
  RunningRequest(TcpStream& stream, ServerContext& context, std::shared_ptr<OutputChannel> channel);

  void set_id(int64_t request_id) { request_id_ = request_id; }
  void abort() { context_.worker->abort(request_id_); }

  // The next engine event, or why there is none. The waits run as one parallel group whose
  // every result comes back, so an event that arrives in the same turn as a timeout or socket
  // readiness is still delivered, never dropped with the losing operation.
  boost::asio::awaitable<Wait> next(EngineEvent& event);

 private:
  enum class Readable { kNothing, kData, kClosed };
  Readable peek_socket();

  TcpStream& stream_;
  ServerContext& context_;
  std::shared_ptr<OutputChannel> channel_;
  boost::asio::steady_timer deadline_;
  int64_t request_id_ = 0;
  bool watch_socket_ = true;
};

}  // namespace deepinfer::server
