// The KV push over TCP: the prefill worker's sender and the decode worker's receiver.
#include "server/kv_transport.h"

#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include "core/logging.h"

namespace deepinfer::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
// A receiver waits this long for each frame of a transfer it started reading.
constexpr std::chrono::seconds kReceiveTimeout{30};

}  // namespace

asio::awaitable<Result<void>> TcpKvTransport::push(const KvPeer& to, const std::string& transfer_id,
                                                   const PrefilledRequest& request) {
  const std::string where = "the decode worker's KV port " + to.host + ":" + std::to_string(to.port);
  beast::tcp_stream stream(co_await asio::this_coro::executor);
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(to.host, ec);
  if (ec) co_return Error{where + " has an address that does not parse: " + ec.message()};
  stream.expires_after(timeout_);
  std::tie(ec) = co_await stream.async_connect(asio::ip::tcp::endpoint(address, to.port), kTuple);
  if (ec) co_return Error{where + " cannot be reached: " + ec.message()};
  // One frame per page, each encoded and written when the one before it was taken.
  const PrefilledKvFrames frames(transfer_id, layout_, request);
  for (size_t i = 0; i < frames.size(); ++i) {
    const std::vector<uint8_t> frame = frames.frame(i);
    stream.expires_after(timeout_);
    std::tie(ec, std::ignore) = co_await asio::async_write(stream, asio::buffer(frame), kTuple);
    if (ec) co_return Error{where + " failed while taking the KV: " + ec.message()};
  }
  std::array<uint8_t, kKvFrameHeaderBytes> head{};
  stream.expires_after(timeout_);
  std::tie(ec, std::ignore) = co_await asio::async_read(stream, asio::buffer(head), kTuple);
  if (ec) co_return Error{where + " did not answer the KV transfer: " + ec.message()};
  Result<KvFrameHeader> header = parse_kv_frame_header(head, kMaxKvJsonBodyBytes);
  if (!header.ok()) co_return Error{where + " answered with " + header.error().message};
  if (header->type != KvFrameType::kReply) co_return Error{where + " answered with a frame that is not a reply"};
  std::vector<uint8_t> body(header->body_bytes);
  std::tie(ec, std::ignore) = co_await asio::async_read(stream, asio::buffer(body), kTuple);
  if (ec) co_return Error{where + " did not finish its answer: " + ec.message()};
  if (Result<void> checked = check_kv_frame_body(*header, body); !checked.ok()) {
    co_return Error{where + ": " + checked.error().message};
  }
  Result<void> reply = parse_kv_reply(body);
  if (!reply.ok()) co_return Error{where + " refused the KV: " + reply.error().message};
  co_return Result<void>{};
}

Result<std::unique_ptr<TcpKvReceiver>> TcpKvReceiver::start(const std::string& host, uint16_t port, KvLayout layout,
                                                            PrefilledInbox& inbox) {
  std::unique_ptr<TcpKvReceiver> receiver(new TcpKvReceiver(std::move(layout), inbox));
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec) return Error{"--kv-port: the host '" + host + "' does not parse: " + ec.message()};
  const asio::ip::tcp::endpoint endpoint(address, port);
  receiver->acceptor_.open(endpoint.protocol(), ec);
  if (!ec) receiver->acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) receiver->acceptor_.bind(endpoint, ec);
  if (!ec) receiver->acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Error{"--kv-port: cannot listen on " + host + ":" + std::to_string(port) +
                 " for KV pushes: " + ec.message()};
  }
  receiver->port_ = receiver->acceptor_.local_endpoint().port();
  asio::co_spawn(receiver->io_, receiver->accept_loop(), asio::detached);
  receiver->thread_ = std::thread([r = receiver.get()] { r->io_.run(); });
  return receiver;
}

TcpKvReceiver::~TcpKvReceiver() {
  io_.stop();
  if (thread_.joinable()) thread_.join();
}

asio::awaitable<void> TcpKvReceiver::accept_loop() {
  for (;;) {
    auto [ec, socket] = co_await acceptor_.async_accept(kTuple);
    if (ec == asio::error::operation_aborted) co_return;
    if (ec) continue;
    asio::co_spawn(io_, receive(std::move(socket)), asio::detached);
  }
}

asio::awaitable<void> TcpKvReceiver::receive(asio::ip::tcp::socket socket) {
  beast::tcp_stream stream(std::move(socket));
  PrefilledKvAssembler assembler(layout_);
  std::optional<std::string> refusal;
  std::vector<uint8_t> body;
  while (!assembler.done() && !refusal) {
    std::array<uint8_t, kKvFrameHeaderBytes> head{};
    stream.expires_after(kReceiveTimeout);
    auto [ec, read] = co_await asio::async_read(stream, asio::buffer(head), kTuple);
    if (ec) {
      if (read > 0 || assembler.transfer_id().size() > 0) {
        DI_LOG(kWarn, "a KV push was cut off (" << ec.message() << "); dropped");
      }
      co_return;  // the sender is gone: nobody to answer
    }
    Result<KvFrameHeader> header = parse_kv_frame_header(head, assembler.max_next_body_bytes());
    if (!header.ok()) {
      refusal = header.error().message;
      break;
    }
    body.resize(header->body_bytes);
    stream.expires_after(kReceiveTimeout);
    std::tie(ec, std::ignore) = co_await asio::async_read(stream, asio::buffer(body), kTuple);
    if (ec) {
      DI_LOG(kWarn, "a KV push was cut off mid-frame (" << ec.message() << "); dropped");
      co_return;
    }
    Result<void> accepted = check_kv_frame_body(*header, body);
    if (accepted.ok()) accepted = assembler.accept(*header, body);
    if (!accepted.ok()) refusal = accepted.error().message;
  }
  if (refusal) {
    DI_LOG(kWarn, "refused a KV push: " << *refusal);
  } else {
    inbox_.put(assembler.transfer_id(), assembler.take());
  }
  const std::vector<uint8_t> reply = encode_kv_reply(refusal);
  stream.expires_after(kReceiveTimeout);
  co_await asio::async_write(stream, asio::buffer(reply), kTuple);
}

}  // namespace deepinfer::server
