// How a prefill worker's KV reaches a decode worker in the direct-push mode (docs/cluster.md): a
// KvTransport sends a prefilled request (its first token, sampling parameters and KV pages in the
// cache's own element type) to the decode worker, whose receiver verifies it
// (kv_transfer_wire.h) and keeps it in its PrefilledInbox until the router's request for it
// comes. TCP over Boost.Asio here; RDMA or NCCL transports implement the same interface.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "core/result.h"
#include "engine/engine_core.h"
#include "server/kv_transfer_wire.h"
#include "server/prefilled_inbox.h"

namespace deepinfer::server {

struct KvPeer {
  std::string host;
  uint16_t port = 0;
};

class KvTransport {
 public:
  virtual ~KvTransport() = default;
  // Sends request to the decode worker at `to`, kept there under transfer_id. Returns once that
  // worker verified and kept it, or why not (unreachable, timed out, or its refusal's message).
  // Runs on the calling coroutine's executor; thread-safe.
  virtual boost::asio::awaitable<Result<void>> push(const KvPeer& to, const std::string& transfer_id,
                                                    const PrefilledRequest& request) = 0;
};

// Frames (kv_transfer_wire.h) over one TCP connection per transfer, page by page.
class TcpKvTransport final : public KvTransport {
 public:
  TcpKvTransport(KvLayout layout, std::chrono::milliseconds timeout) : layout_(std::move(layout)), timeout_(timeout) {}
  boost::asio::awaitable<Result<void>> push(const KvPeer& to, const std::string& transfer_id,
                                            const PrefilledRequest& request) override;

 private:
  KvLayout layout_;
  std::chrono::milliseconds timeout_;  // for the connect and for each frame
};

// The decode worker's side: accepts pushes on a port of its own, on a thread of its own; each
// transfer verified against layout goes to inbox and is answered ok, anything else is answered
// with the reason and dropped.
class TcpKvReceiver {
 public:
  // port 0: any free port (port() says which). inbox must outlive the receiver.
  static Result<std::unique_ptr<TcpKvReceiver>> start(const std::string& host, uint16_t port, KvLayout layout,
                                                      PrefilledInbox& inbox);
  // Stops accepting and ends the thread; transfers in progress are dropped.
  ~TcpKvReceiver();
  uint16_t port() const { return port_; }

 private:
  TcpKvReceiver(KvLayout layout, PrefilledInbox& inbox) : layout_(std::move(layout)), inbox_(inbox) {}
  boost::asio::awaitable<void> accept_loop();
  boost::asio::awaitable<void> receive(boost::asio::ip::tcp::socket socket);

  KvLayout layout_;
  PrefilledInbox& inbox_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_{io_};
  uint16_t port_ = 0;
  std::thread thread_;
};

}  // namespace deepinfer::server
