// RunningRequest's wait for the next event, the deadline or the client's hang-up.
#include "server/running_request.h"

#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>

namespace deepinfer::server {

namespace asio = boost::asio;

RunningRequest::RunningRequest(TcpStream& stream, ServerContext& context, std::shared_ptr<OutputChannel> channel)
    : stream_(stream), context_(context), channel_(std::move(channel)), deadline_(stream.get_executor()) {
  deadline_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(context.config.request_timeout_s)));
}

asio::awaitable<Wait> RunningRequest::next(EngineEvent& event) {
  namespace exp = asio::experimental;
  for (;;) {
    if (!watch_socket_) {
      auto [order, receive_error, received, timer_error] =
          co_await exp::make_parallel_group(channel_->async_receive(asio::deferred),
                                            deadline_.async_wait(asio::deferred))
              .async_wait(exp::wait_for_one(), asio::use_awaitable);
      if (!receive_error) {
        event = std::move(received);
        co_return Wait::kEvent;
      }
      co_return order[0] == 0 ? Wait::kDropped : Wait::kTimedOut;
    }
    auto [order, receive_error, received, timer_error, socket_error] =
        co_await exp::make_parallel_group(channel_->async_receive(asio::deferred), deadline_.async_wait(asio::deferred),
                                          stream_.socket().async_wait(asio::socket_base::wait_read, asio::deferred))
            .async_wait(exp::wait_for_one(), asio::use_awaitable);
    if (!receive_error) {
      event = std::move(received);
      co_return Wait::kEvent;
    }
    if (order[0] == 0) co_return Wait::kDropped;
    if (order[0] == 1) co_return Wait::kTimedOut;
    if (socket_error) co_return Wait::kDisconnected;
    const Readable readable = peek_socket();
    if (readable == Readable::kClosed) co_return Wait::kDisconnected;
    // The client pipelined its next request: the socket stays readable, so stop watching it.
    if (readable == Readable::kData) watch_socket_ = false;
  }
}

// Readiness is only a hint: the reactor may report an edge whose bytes an earlier read already
// took (under load it often does), so a wake-up with nothing to read is not a disconnect. A peek
// tells the three apart: bytes (a pipelined request), an orderly close, or nothing yet.
RunningRequest::Readable RunningRequest::peek_socket() {
  char byte = 0;
  const ssize_t n = ::recv(stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return Readable::kData;
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return Readable::kNothing;
  return Readable::kClosed;  // 0: the client closed; another error: the connection is gone
}

}  // namespace deepinfer::server
