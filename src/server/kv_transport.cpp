// The KV push over TCP: the prefill worker's sender and the decode worker's receiver.
#include "server/kv_transport.h"

#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <deque>
#include <mutex>
#include <optional>

#include "core/logging.h"

namespace deepinfer::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
// A receiver waits this long for each frame of a transfer it started reading: the pieces come
// as the prefill worker computes them, so a frame may wait for its prefill's next step.
constexpr std::chrono::seconds kReceiveTimeout{120};

// The sender: one coroutine owns the connection and sends what put() and finish() queue; a
// doorbell channel wakes it. Past a failure it sends nothing more and finish() returns the failure.
class TcpKvPush final : public KvPush, public std::enable_shared_from_this<TcpKvPush> {
 public:
  TcpKvPush(asio::any_io_executor executor, KvPeer to, std::vector<uint8_t> header_frame,
            std::chrono::milliseconds timeout)
      : executor_(executor),
        to_(std::move(to)),
        header_frame_(std::move(header_frame)),
        timeout_(timeout),
        doorbell_(executor, 1),
        verdict_(executor, 1) {}

  void start() {
    asio::co_spawn(
        executor_, [self = shared_from_this()] { return self->run(); }, asio::detached);
  }

  void put(PrefillKvPiece piece) override {
    {
      const std::lock_guard lock(mutex_);
      pieces_.push_back(std::move(piece));
    }
    ring();
  }

  asio::awaitable<Result<void>> finish(int32_t first_token, uint64_t seed) override {
    {
      const std::lock_guard lock(mutex_);
      end_frame_ = encode_kv_end_frame(first_token, seed);
    }
    ring();
    auto [ec, error] = co_await verdict_.async_receive(kTuple);
    if (ec) co_return Error{where() + ": the push ended without an answer (" + ec.message() + ")"};
    if (!error.empty()) co_return Error{std::move(error)};
    co_return Result<void>{};
  }

  void cancel() override {
    {
      const std::lock_guard lock(mutex_);
      cancelled_ = true;
    }
    ring();
  }

 private:
  std::string where() const { return "the decode worker's KV port " + to_.host + ":" + std::to_string(to_.port); }
  void ring() { doorbell_.try_send(boost::system::error_code{}); }
  bool is_cancelled() {
    const std::lock_guard lock(mutex_);
    return cancelled_;
  }

  asio::awaitable<Result<void>> write(beast::tcp_stream& stream, const std::vector<uint8_t>& frame) {
    stream.expires_after(timeout_);
    auto [ec, written] = co_await asio::async_write(stream, asio::buffer(frame), kTuple);
    if (ec) co_return Error{where() + " failed while taking the KV: " + ec.message()};
    co_return Result<void>{};
  }

  asio::awaitable<Result<void>> connect(beast::tcp_stream& stream) {
    boost::system::error_code ec;
    const auto address = asio::ip::make_address(to_.host, ec);
    if (ec) co_return Error{where() + " has an address that does not parse: " + ec.message()};
    stream.expires_after(timeout_);
    std::tie(ec) = co_await stream.async_connect(asio::ip::tcp::endpoint(address, to_.port), kTuple);
    if (ec) co_return Error{where() + " cannot be reached: " + ec.message()};
    co_return co_await write(stream, header_frame_);
  }

  asio::awaitable<Result<void>> read_reply(beast::tcp_stream& stream) {
    std::array<uint8_t, kKvFrameHeaderBytes> head{};
    stream.expires_after(timeout_);
    auto [ec, read] = co_await asio::async_read(stream, asio::buffer(head), kTuple);
    if (ec) co_return Error{where() + " did not answer the KV transfer: " + ec.message()};
    Result<KvFrameHeader> header = parse_kv_frame_header(head, kMaxKvJsonBodyBytes);
    if (!header.ok()) co_return Error{where() + " answered with " + header.error().message};
    if (header->type != KvFrameType::kReply) co_return Error{where() + " answered with a frame that is not a reply"};
    std::vector<uint8_t> body(header->body_bytes);
    std::tie(ec, read) = co_await asio::async_read(stream, asio::buffer(body), kTuple);
    if (ec) co_return Error{where() + " did not finish its answer: " + ec.message()};
    if (Result<void> checked = check_kv_frame_body(*header, body); !checked.ok()) {
      co_return Error{where() + ": " + checked.error().message};
    }
    Result<void> reply = parse_kv_reply(body);
    if (!reply.ok()) co_return Error{where() + " refused the KV: " + reply.error().message};
    co_return Result<void>{};
  }

  asio::awaitable<void> run() {
    beast::tcp_stream stream(executor_);
    bool connected = false;
    Result<void> state;  // the first failure; after it nothing is sent
    for (;;) {
      std::deque<PrefillKvPiece> pieces;
      std::optional<std::vector<uint8_t>> end_frame;
      bool cancelled = false;
      {
        const std::lock_guard lock(mutex_);
        pieces.swap(pieces_);
        end_frame = std::move(end_frame_);
        end_frame_.reset();
        cancelled = cancelled_;
      }
      if (cancelled) {  // the connection closes without an end frame: the receiver drops it
        verdict_.try_send(boost::system::error_code{}, where() + ": the push was cancelled");
        co_return;
      }
      if (state.ok() && !connected && (!pieces.empty() || end_frame)) {
        state = co_await connect(stream);
        connected = true;
      }
      for (const PrefillKvPiece& piece : pieces) {
        if (!state.ok() || is_cancelled()) break;
        state = co_await write(stream, encode_kv_piece_frame(piece));
      }
      if (is_cancelled()) continue;  // answered at the loop's top, without the end frame
      if (end_frame) {
        if (state.ok()) state = co_await write(stream, *end_frame);
        if (state.ok()) state = co_await read_reply(stream);
        verdict_.try_send(boost::system::error_code{}, state.ok() ? std::string() : state.error().message);
        co_return;
      }
      co_await doorbell_.async_receive(kTuple);
    }
  }

  using Doorbell = asio::experimental::concurrent_channel<void(boost::system::error_code)>;
  using Verdict = asio::experimental::concurrent_channel<void(boost::system::error_code, std::string)>;

  asio::any_io_executor executor_;
  KvPeer to_;
  std::vector<uint8_t> header_frame_;
  std::chrono::milliseconds timeout_;
  Doorbell doorbell_;
  Verdict verdict_;
  std::mutex mutex_;  // guards the three below
  std::deque<PrefillKvPiece> pieces_;
  std::optional<std::vector<uint8_t>> end_frame_;
  bool cancelled_ = false;
};

}  // namespace

std::shared_ptr<KvPush> TcpKvTransport::open(asio::any_io_executor executor, const KvPeer& to,
                                             const std::string& transfer_id, std::span<const int32_t> prompt_token_ids,
                                             const SamplingParams& params) {
  auto push = std::make_shared<TcpKvPush>(
      executor, to, encode_kv_header_frame(transfer_id, layout_, prompt_token_ids, params), timeout_);
  push->start();
  return push;
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
  auto [ec, written] = co_await asio::async_write(stream, asio::buffer(reply), kTuple);
  if (ec || !refusal) co_return;
  // A refused transfer's sender is still sending its pieces, and reads the reply after its end
  // frame: what it sends is read and dropped until it closes, so no reset loses the reply.
  stream.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ec);
  std::array<uint8_t, 16384> dropped{};
  while (!ec) {
    stream.expires_after(kReceiveTimeout);
    std::tie(ec, written) = co_await stream.async_read_some(asio::buffer(dropped), kTuple);
  }
}

}  // namespace deepinfer::server
