// How a prefill worker's KV reaches a decode worker in the direct-push mode (docs/cluster.md): a
// KvTransport opens a push for a prefill worker's request before its prefill runs; the PROMPT
// engine hands it the prompt's KV layer by layer as the prefill computes it
// (engine/prefill_kv_export.h), the push sends each piece on at once, and its first token and seed
// close it. The decode worker's receiver verifies the transfer (kv_transfer_wire.h) and keeps it
// in its PrefilledInbox until the router's request for it comes. TCP over Boost.Asio here; RDMA
// or NCCL transports implement the same interface.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
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

// One request's push. put() (any thread) queues a piece, sent in order; the first piece (or the
// end) opens the connection, so a request still queued on the prefill worker holds none.
class KvPush : public PrefillKvSink {
 public:
  // The prefill is done: sends the end frame (the first token and the seed it was drawn with) and
  // returns once the decode worker verified and kept the KV, or why not (unreachable, timed out,
  // or its refusal's message). Call once.
  virtual boost::asio::awaitable<Result<void>> finish(int32_t first_token, uint64_t seed) = 0;
  // The prefill will not finish (it failed or was aborted): the push stops, and the decode worker
  // drops what it got; a finish() after it returns that it was cancelled. Thread-safe.
  virtual void cancel() = 0;
};

class KvTransport {
 public:
  virtual ~KvTransport() = default;
  // A push of the KV of this prompt to the decode worker at `to`, kept there under transfer_id;
  // it runs on executor. Thread-safe.
  virtual std::shared_ptr<KvPush> open(boost::asio::any_io_executor executor, const KvPeer& to,
                                       const std::string& transfer_id, std::span<const int32_t> prompt_token_ids,
                                       const SamplingParams& params) = 0;
};

// Frames (kv_transfer_wire.h) over one TCP connection per transfer.
class TcpKvTransport final : public KvTransport {
 public:
  TcpKvTransport(KvLayout layout, std::chrono::milliseconds timeout) : layout_(std::move(layout)), timeout_(timeout) {}
  std::shared_ptr<KvPush> open(boost::asio::any_io_executor executor, const KvPeer& to, const std::string& transfer_id,
                               std::span<const int32_t> prompt_token_ids, const SamplingParams& params) override;

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
