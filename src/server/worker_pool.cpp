// WorkerPool: placing a request on a worker and relaying the worker's events to its connection.
#include "server/worker_pool.h"

#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <random>

#include "core/logging.h"
#include "server/encode_api.h"
#include "server/token_api.h"

namespace deepinfer::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {
constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
}  // namespace

// What a disaggregated request's prefill stage hands its decode stage.
struct WorkerPool::Handover {
  bool done = false;  // the prefill worker reported its KV delivered
  bool first_token_relayed = false;
  int32_t first_token = 0;
  std::optional<uint64_t> seed;   // the first token's, from the prefill worker
  int32_t num_cached_tokens = 0;  // the prefill's prefix-cache hit: what the client is told
  // The KV did not reach the decode worker (why): the first token is out, and a decode worker
  // computes the prompt again.
  std::optional<std::string> kv_lost;
  // kv_lost because the prefill worker failed after its first token, not because the decode
  // worker refused the push: that decode worker may still continue the request.
  bool prefill_failed = false;
  // An n > 1 request's prefill worker (which runs sample 0 alone) ended sample 0 at its first
  // token, handing nothing over; nothing reached the client, and the decode worker runs it whole.
  bool runs_whole = false;
};

struct WorkerPool::Relay {
  int64_t id = 0;
  std::shared_ptr<OutputChannel> channel;
  Submission submission;    // without its channel: a disaggregated request's two requests derive from it
  std::string body;         // the token-level request of a whole one, serialised once
  // The request's images as files, kept when an image encoder's rows replaced them in submission:
  // what a worker whose body limit the rows pass gets instead (body_for).
  std::vector<ImageInput> image_files;
  std::string transfer_id;  // a disaggregated request's pushed KV, on its decode worker
  RoutedRequest routed;
  Metrics* metrics = nullptr;
  std::chrono::steady_clock::time_point submitted;
  // Touched on the connection's strand only:
  std::optional<beast::tcp_stream> upstream;
  bool aborted = false;
  bool started = false;  // an output with tokens (or the end) arrived
  std::chrono::steady_clock::time_point last_token;
};

namespace {

enum class Attempt { kDone, kTryAnother };

// Which part of a request a worker runs: all of it (role both), or its prefill or decode.
enum class Stage { kWhole, kPrefill, kDecode };

using Handover = WorkerPool::Handover;

// The prefill worker's event with the first token ends its request (kPrefilled); to the client it
// is the first token of a request that goes on.
bool take_first_token(RequestOutput& output, Handover& handover) {
  if (output.samples.size() != 1 || output.samples[0].finish_reason != FinishReason::kPrefilled) return false;
  SampleOutput& sample = output.samples[0];
  if (sample.new_token_ids.size() != 1) return false;
  handover.first_token = sample.new_token_ids[0];
  handover.num_cached_tokens = output.num_cached_tokens;
  sample.finished = false;
  sample.finish_reason = FinishReason::kNone;
  output.finished = false;
  return true;
}

struct AttemptResult {
  Attempt outcome = Attempt::kDone;
  std::string failure;  // kTryAnother: why this worker did not take it
  bool mark_failed = false;
};

std::string worker_name(const WorkerLease& lease) { return "worker " + lease.id; }

// The last event of a request that could not finish.
EngineEvent error_event(int status, std::string message) {
  EngineEvent event;
  event.error = Error{std::move(message)};
  event.error_status = status;
  return event;
}

double seconds_between(std::chrono::steady_clock::time_point from, std::chrono::steady_clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// The router's own latency and token metrics, as the engine thread records them in serve (TTFT
// here includes the hop to the worker and back).
void record(WorkerPool::Relay& relay, const RequestOutput& output) {
  if (relay.metrics == nullptr) return;
  const auto now = std::chrono::steady_clock::now();
  int64_t num_new_tokens = 0;
  for (const SampleOutput& sample : output.samples) num_new_tokens += static_cast<int64_t>(sample.new_token_ids.size());
  if (!relay.started && (num_new_tokens > 0 || output.finished)) {
    relay.started = true;
    relay.metrics->add_prompt_tokens(output.num_prompt_tokens);
    if (num_new_tokens > 0) relay.metrics->observe_ttft(seconds_between(relay.submitted, now));
  } else if (num_new_tokens > 0) {
    relay.metrics->observe_inter_token(seconds_between(relay.last_token, now));
  }
  if (num_new_tokens > 0) {
    relay.last_token = now;
    relay.metrics->add_generation_tokens(num_new_tokens);
  }
  if (output.finished) relay.metrics->observe_e2e(seconds_between(relay.submitted, now));
}

asio::awaitable<bool> deliver(WorkerPool::Relay& relay, EngineEvent event) {
  event.output.request_id = relay.id;
  if (!event.error) record(relay, event.output);
  auto [error] = co_await relay.channel->async_send(boost::system::error_code{}, std::move(event), kTuple);
  co_return !error;
}

// One worker's try at the request: kDone once the request ended (finished, or an error event was
// delivered), kTryAnother when the worker never produced an event.
asio::awaitable<AttemptResult> attempt(WorkerPool::Relay& relay, const WorkerLease& lease,
                                       const WorkerPoolOptions& options, const std::string& body, Stage stage,
                                       Handover& handover) {
  AttemptResult result;
  const std::string where = worker_name(lease);
  const auto executor = co_await asio::this_coro::executor;
  relay.upstream.emplace(executor);
  beast::tcp_stream& upstream = *relay.upstream;
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(lease.host, ec);
  if (ec) {
    result = {Attempt::kTryAnother, where + " has an address that does not parse: " + ec.message(), true};
    co_return result;
  }
  upstream.expires_after(options.connect_timeout);
  std::tie(ec) = co_await upstream.async_connect(asio::ip::tcp::endpoint(address, lease.port), kTuple);
  if (relay.aborted) co_return result;
  if (ec) {
    result = {Attempt::kTryAnother, where + " cannot be reached: " + ec.message(), true};
    co_return result;
  }
  http::request<http::string_body> request{http::verb::post, std::string(kTokenApiPath), 11};
  request.set(http::field::host, lease.host + ":" + std::to_string(lease.port));
  request.set(http::field::content_type, "application/json");
  if (options.worker_api_key) request.set(http::field::authorization, "Bearer " + *options.worker_api_key);
  request.keep_alive(false);
  request.body() = body;
  request.prepare_payload();
  upstream.expires_after(std::chrono::seconds(30));
  std::tie(ec, std::ignore) = co_await http::async_write(upstream, request, kTuple);
  if (relay.aborted) co_return result;
  if (ec) {
    result = {Attempt::kTryAnother, where + " failed while taking the request: " + ec.message(), true};
    co_return result;
  }
  // The worker answers within its own request timeout; a stream may be quiet while it queues.
  upstream.expires_never();
  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);
  std::tie(ec, std::ignore) = co_await http::async_read_header(upstream, buffer, parser, kTuple);
  if (relay.aborted) co_return result;
  if (ec) {
    result = {Attempt::kTryAnother, where + " failed before answering: " + ec.message(), true};
    co_return result;
  }
  const int status = static_cast<int>(parser.get().result_int());
  std::string pending;  // body bytes not yet split into lines
  std::array<char, 16384> chunk{};
  bool any_event = false;
  while (!parser.is_done()) {
    parser.get().body().data = chunk.data();
    parser.get().body().size = chunk.size();
    std::tie(ec, std::ignore) = co_await http::async_read_some(upstream, buffer, parser, kTuple);
    if (relay.aborted) co_return result;
    if (ec == http::error::need_buffer) ec = {};
    pending.append(chunk.data(), chunk.size() - parser.get().body().size);
    if (status == 200) {
      for (size_t newline = pending.find('\n'); newline != std::string::npos; newline = pending.find('\n')) {
        const auto json = nlohmann::json::parse(pending.substr(0, newline), nullptr, false);
        pending.erase(0, newline + 1);
        Result<EngineEvent> event = event_from_json(json);
        if (!event.ok()) {
          ec = asio::error::invalid_argument;
          pending = "it sent a malformed event: " + event.error().message;
          break;
        }
        if (!any_event && event->error && event->error_status == 503) {
          // The worker is shutting down or lost its device before the request ran: nothing reached
          // the client yet, so another worker may take it.
          result = {Attempt::kTryAnother, where + " is unavailable: " + event->error->message, true};
          co_return result;
        }
        if (stage == Stage::kPrefill && !any_event && !event->error && event->output.finished &&
            relay.submission.params.n > 1 && !event->first_token_seed) {
          handover.runs_whole = true;
          co_return result;
        }
        if (stage == Stage::kPrefill && !event->error && take_first_token(event->output, handover)) {
          handover.first_token_relayed = true;
          handover.seed = event->first_token_seed;
        } else if (stage == Stage::kPrefill && event->first_token_seed) {
          handover.seed = *event->first_token_seed;
          if (event->error) {
            handover.kv_lost = where + ": " + event->error->message;
          } else {
            handover.done = true;
          }
          co_return result;
        }
        if (stage == Stage::kDecode) event->output.num_cached_tokens = handover.num_cached_tokens;
        const bool last = event->error.has_value() || event->output.finished;
        any_event = true;
        if (!co_await deliver(relay, std::move(*event))) co_return result;  // the client left
        if (last) co_return result;
      }
    }
    if (ec) break;
  }
  if (status != 200) {
    const auto json = nlohmann::json::parse(pending, nullptr, false);
    std::string message = json.is_object() && json.contains("error") && json["error"].is_string()
                              ? json["error"].get<std::string>()
                              : "HTTP " + std::to_string(status);
    // Overloaded or going away, or (410) a decode worker without the KV pushed for it: nothing
    // reached the client from it, so another worker may take it.
    if (status == 429 || status == 503 || (stage == Stage::kDecode && status == 410)) {
      result = {Attempt::kTryAnother, where + " refused the request: " + message, status == 503};
      co_return result;
    }
    const int relayed_status = status == 400 ? 400 : 502;
    EngineEvent refused = error_event(relayed_status, where + ": " + message);
    co_await deliver(relay, std::move(refused));
    co_return result;
  }
  const std::string why = ec ? (pending.starts_with("it sent") ? pending : ec.message())
                             : std::string("the stream ended before the request finished");
  if (!any_event) {
    result = {Attempt::kTryAnother, where + " failed before its first token: " + why, true};
    co_return result;
  }
  result.mark_failed = true;  // done, but no new request goes there until it heartbeats again
  if (stage == Stage::kPrefill && handover.first_token_relayed && handover.seed) {
    // Only the first token is out, and its seed is known: a decode worker computes the prompt again
    // and goes on from it, as for a failed push.
    handover.kv_lost = where + " failed after the first token (" + why + ")";
    handover.prefill_failed = true;
    co_return result;
  }
  std::string lost = "the output so far is incomplete";
  if (stage == Stage::kPrefill && handover.first_token_relayed) {
    lost = "the seed its first token was drawn with was lost with it, so no other worker can continue the request";
  }
  co_await deliver(relay, error_event(502, where + " failed while running the request (" + why + "); " + lost));
  co_return result;
}

// submission's body for the worker of lease (serialised: what the caller has of it already). When an
// encoder's rows make it larger than the worker takes, the same request with the image files, which
// the worker encodes itself (counted as a fallback by encoders).
std::string body_for(const WorkerPool::Relay& relay, const Submission& submission, const WorkerLease& lease,
                     EncoderSelector* encoders, const std::string* serialised = nullptr) {
  std::string body = serialised != nullptr ? *serialised : submission_to_json(submission).dump();
  if (relay.image_files.empty() || lease.max_body_bytes <= 0 ||
      static_cast<int64_t>(body.size()) <= lease.max_body_bytes) {
    return body;
  }
  DI_LOG(kWarn, "router: the request with its images' rows is " << body.size() << " bytes, over the "
                                                                << lease.max_body_bytes << " worker " << lease.id
                                                                << " takes; it gets the image files");
  if (encoders != nullptr) encoders->count_fallback();
  Submission with_files = submission;
  with_files.images = relay.image_files;
  return submission_to_json(with_files).dump();
}

void stop_relay(WorkerPool::Relay& relay) {
  relay.aborted = true;
  boost::system::error_code ignored;
  if (relay.upstream) relay.upstream->socket().close(ignored);
}

}  // namespace

WorkerPool::WorkerPool(WorkerSelector& selector, EncoderSelector* encoders, Metrics* metrics, WorkerPoolOptions options)
    : selector_(selector), encoders_(encoders), metrics_(metrics), options_(std::move(options)) {
  // Transfer ids name a pushed KV on the decode worker: unique across routers and restarts.
  std::random_device random;
  transfer_id_prefix_ = std::to_string(random()) + "-" + std::to_string(random()) + "-";
}

std::string WorkerPool::prefill_request_body(Relay& relay, const WorkerLease& prefill_lease,
                                             const WorkerLease& decode) const {
  Submission prefill = relay.submission;
  // A PROMPT engine runs one sample: sample 0. The decode worker forks the others from the prompt's
  // last block, with the seed sample 0's first token was drawn with.
  prefill.params.n = 1;
  KvHandoff handoff;
  handoff.mode = options_.kv_transfer;
  if (handoff.mode == KvTransferMode::kPush) {
    handoff.transfer_id = relay.transfer_id;
    handoff.host = decode.host;
    handoff.port = decode.kv_port;
  }
  prefill.kv_handoff = std::move(handoff);
  return body_for(relay, prefill, prefill_lease, encoders_);
}

asio::awaitable<void> WorkerPool::run_decode(Relay& relay, WorkerLease decode, Handover& handover) {
  Submission continuation = relay.submission;
  continuation.params.seed = handover.seed;  // the first token's, so the draws go on from it
  PrefilledSource source;
  source.mode = options_.kv_transfer;
  source.transfer_id = relay.transfer_id;
  source.first_token = handover.first_token;
  source.kv_lost = handover.kv_lost.has_value();
  continuation.continues = std::move(source);
  std::vector<std::string> tried;
  std::string failure;
  std::optional<WorkerLease> next;
  if (handover.kv_lost && !handover.prefill_failed) {
    // No new request goes to a decode worker the KV could not reach until it heartbeats again.
    failure = *handover.kv_lost;
    selector_.mark_failed(decode.id);
    selector_.release(decode);
    tried.push_back(decode.id);
  } else {
    // The prefill worker failed: the decode worker chosen with it is fine and computes the prompt.
    if (handover.prefill_failed) {
      DI_LOG(kWarn, "router: " << *handover.kv_lost << "; continuing on " << worker_name(decode));
    }
    next = std::move(decode);
  }
  for (;;) {
    if (!next && !relay.aborted && static_cast<int32_t>(tried.size()) < options_.max_attempts) {
      // Pushed KV sits on the worker it went to alone: another one computes the prompt again. The
      // store's pages any decode worker can load.
      if (options_.kv_transfer == KvTransferMode::kPush) continuation.continues->kv_lost = true;
      next = selector_.acquire_decode(relay.routed, tried, continuation.continues->kv_lost);
      if (next) DI_LOG(kWarn, "router: " << failure << "; continuing on " << worker_name(*next));
    }
    if (relay.aborted) {
      if (next) selector_.release(*next);
      co_return;
    }
    if (!next) {
      std::string message = "the decode stage failed after the first token: " + failure;
      if (handover.prefill_failed) message += "; before that " + *handover.kv_lost + ", losing the prompt's KV";
      co_await deliver(relay, error_event(502, message + "; the output so far is incomplete"));
      co_return;
    }
    const std::string body = body_for(relay, continuation, *next, encoders_);
    const AttemptResult result = co_await attempt(relay, *next, options_, body, Stage::kDecode, handover);
    if (result.mark_failed) selector_.mark_failed(next->id);
    selector_.release(*next);
    if (result.outcome == Attempt::kDone || relay.aborted) co_return;
    tried.push_back(next->id);
    failure = result.failure;
    next.reset();
  }
}

asio::awaitable<bool> WorkerPool::encode_images(Relay& relay, std::chrono::steady_clock::time_point deadline) {
  std::vector<ImageInput>& images = relay.submission.images;
  int64_t tokens = 0;
  for (const ImageInput& image : images) tokens += options_.image_format->tokens_for(image.grid);
  const std::string body = encode_request_to_json(images).dump();
  // Given back however the attempt ends.
  struct Lease {
    EncoderSelector& encoders;
    EncoderLease lease;
    ~Lease() { encoders.release(lease); }
  };
  std::vector<std::string> tried;
  std::string failure = "no image encoder is live";
  while (static_cast<int32_t>(tried.size()) < options_.max_attempts && !relay.aborted &&
         std::chrono::steady_clock::now() < deadline) {
    const std::optional<EncoderLease> acquired = encoders_->acquire(tokens, tried);
    if (!acquired) break;
    const Lease held{*encoders_, *acquired};
    const EncoderLease& lease = held.lease;
    tried.push_back(lease.id);
    const std::string where = "image encoder " + lease.id;
    relay.upstream.emplace(co_await asio::this_coro::executor);
    beast::tcp_stream& upstream = *relay.upstream;
    boost::system::error_code ec;
    const auto address = asio::ip::make_address(lease.host, ec);
    if (!ec) {
      upstream.expires_after(options_.connect_timeout);
      std::tie(ec) = co_await upstream.async_connect(asio::ip::tcp::endpoint(address, lease.port), kTuple);
    }
    http::response<http::string_body> response;
    if (!ec && !relay.aborted) {
      http::request<http::string_body> request{http::verb::post, std::string(kEncodeApiPath), 11};
      request.set(http::field::host, lease.host + ":" + std::to_string(lease.port));
      request.set(http::field::content_type, "application/json");
      if (options_.worker_api_key) request.set(http::field::authorization, "Bearer " + *options_.worker_api_key);
      request.keep_alive(false);
      request.body() = body;
      request.prepare_payload();
      // The encoder answers once the images are through: within what is left of the request's time.
      upstream.expires_at(deadline);
      std::tie(ec, std::ignore) = co_await http::async_write(upstream, request, kTuple);
      if (!ec && !relay.aborted) {
        beast::flat_buffer buffer;
        http::response_parser<http::string_body> parser;
        // The rows as float32 in base64 (4 x 4 / 3 bytes a value), and room for the JSON around them.
        const int64_t values = int64_t{1 + options_.image_format->deepstack_layers} * tokens * options_.row_width;
        parser.body_limit(static_cast<uint64_t>(values * 6 + (int64_t{1} << 20)));
        std::tie(ec, std::ignore) = co_await http::async_read(upstream, buffer, parser, kTuple);
        response = parser.release();
      }
    }
    relay.upstream.reset();
    if (relay.aborted) co_return false;
    const int status = static_cast<int>(response.result_int());
    const auto json = nlohmann::json::parse(response.body(), nullptr, false);
    const std::string said = json.is_object() && json.contains("error") && json["error"].is_string()
                                 ? json["error"].get<std::string>()
                                 : "HTTP " + std::to_string(status);
    if (!ec && status == 400) {  // an image this encoder's limits refuse: the client's to fix
      co_await deliver(relay, error_event(400, where + ": " + said));
      co_return false;
    }
    Result<std::vector<ImageInput>> encoded =
        ec              ? Result<std::vector<ImageInput>>(Error{"cannot be reached: " + ec.message()})
        : status != 200 ? Result<std::vector<ImageInput>>(Error{"did not encode the images: " + said})
                        : encode_response_from_json(json, images.size());
    for (size_t i = 0; encoded.ok() && i < images.size(); ++i) {
      const ImageGrid& want = images[i].grid;
      const ImageGrid& got = (*encoded)[i].grid;
      if (got.frames != want.frames || got.rows != want.rows || got.columns != want.columns) {
        encoded = Error{"gave images[" + std::to_string(i) +
                        "] another grid than the router placed (a different "
                        "preprocessor_config.json?)"};
      }
    }
    if (encoded.ok()) {
      relay.image_files = images;
      for (size_t i = 0; i < images.size(); ++i) {
        (*encoded)[i].first_token = images[i].first_token;
        images[i] = std::move((*encoded)[i]);
      }
      relay.body = submission_to_json(relay.submission).dump();
      co_return true;
    }
    failure = where + " " + encoded.error().message;
    // Gone or going away: no new images go there until it heartbeats again. Busy (429), slow (past
    // the request's deadline), or this request's own trouble: only this request goes elsewhere.
    if ((ec && ec != beast::error::timeout) || status == 503) encoders_->mark_failed(lease.id);
  }
  if (relay.aborted) co_return false;
  encoders_->count_fallback();
  DI_LOG(kWarn, "router: " << failure << "; the worker encodes the request's images itself");
  co_return true;
}

WorkerPool::~WorkerPool() = default;

Admission WorkerPool::submit(Submission submission) {
  if (auto reason = unavailable()) return Refusal{false, *reason};
  auto relay = std::make_shared<Relay>();
  relay->channel = submission.channel;
  relay->metrics = metrics_;
  relay->submitted = std::chrono::steady_clock::now();
  relay->routed = routed_request(submission.prompt_token_ids, submission.params, selector_.options().model,
                                 submission.cache_salt, selector_.block_size(), submission.images);
  relay->body = submission_to_json(submission).dump();
  relay->submission = std::move(submission);
  relay->submission.channel.reset();
  {
    std::lock_guard lock(mutex_);
    relay->id = next_id_++;
    open_.emplace(relay->id, relay);
  }
  relay->transfer_id = transfer_id_prefix_ + std::to_string(relay->id);
  auto run = [this, relay]() -> asio::awaitable<void> {
    // One deadline for the encoder and the policy's hold.
    const auto give_up_at =
        std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                               std::chrono::duration<double>(options_.request_timeout_s));
    const bool encode = encoders_ != nullptr && options_.image_format != nullptr && !relay->submission.images.empty() &&
                        encoders_->num_live() > 0;
    if (encode && !co_await encode_images(*relay, give_up_at)) {
      std::lock_guard lock(mutex_);
      open_.erase(relay->id);
      co_return;
    }
    std::vector<std::string> tried;
    std::string last_failure;
    while (!relay->aborted) {
      WorkerSelector::Selection selection = selector_.acquire(relay->routed, tried);
      asio::steady_timer wait(co_await asio::this_coro::executor);
      // The policy holds it (the seeds' quota pull): ask again until placed, abandoned or late.
      while (selection.outcome == WorkerSelector::Outcome::kHeld && !relay->aborted &&
             std::chrono::steady_clock::now() < give_up_at) {
        wait.expires_after(std::chrono::milliseconds(5));
        co_await wait.async_wait(kTuple);
        selection = selector_.poll_held(selection.ticket);
      }
      if (selection.outcome == WorkerSelector::Outcome::kHeld) {
        selector_.cancel_held(selection.ticket);
        if (!relay->aborted) {
          co_await deliver(*relay, error_event(503, "no worker had room for the request within the request timeout (" +
                                                        selector_.policy_name() + " policy)"));
        }
        break;
      }
      if (selection.outcome == WorkerSelector::Outcome::kNoWorker) {
        std::string message = tried.empty() ? "no live worker is registered in Redis at " + options_.registry_url
                                            : "no worker could take the request; the last: " + last_failure;
        co_await deliver(*relay, error_event(503, std::move(message)));
        break;
      }
      const WorkerLease lease = selection.lease;
      Handover handover;
      std::optional<WorkerLease> decode;
      std::string body;
      Stage stage = Stage::kWhole;
      if (lease.role == "prefill") {
        decode = selector_.acquire_decode(relay->routed);
        if (!decode) {
          selector_.release(lease);
          co_await deliver(*relay, error_event(503, "no live decode worker is registered in Redis at " +
                                                        options_.registry_url + " for the prefill worker " + lease.id));
          break;
        }
        stage = Stage::kPrefill;
        body = prefill_request_body(*relay, lease, *decode);
      } else {
        body = body_for(*relay, relay->submission, lease, encoders_, &relay->body);
      }
      AttemptResult result = co_await attempt(*relay, lease, options_, body, stage, handover);
      // Marked before its load is released: a release offers held requests again, and another
      // connection's request may be choosing right now; neither may pick a worker that just failed.
      if (result.mark_failed) selector_.mark_failed(lease.id);
      selector_.release(lease);
      std::string attempted = lease.id;
      if (decode && handover.runs_whole && !relay->aborted) {
        result = co_await attempt(*relay, *decode, options_,
                                  body_for(*relay, relay->submission, *decode, encoders_, &relay->body), Stage::kWhole,
                                  handover);
        if (result.mark_failed) selector_.mark_failed(decode->id);
        selector_.release(*decode);
        attempted = decode->id;
      } else if (decode && (handover.done || handover.kv_lost) && !relay->aborted) {
        co_await run_decode(*relay, *decode, handover);  // releases the decode lease
      } else if (decode) {
        selector_.release(*decode);
      }
      if (result.outcome == Attempt::kDone) break;
      DI_LOG(kWarn, "router: " << result.failure << "; trying another worker");
      tried.push_back(attempted);
      last_failure = result.failure;
      if (static_cast<int32_t>(tried.size()) >= options_.max_attempts) {
        co_await deliver(*relay,
                         error_event(503, "no worker could take the request after " + std::to_string(tried.size()) +
                                              " tries; the last: " + last_failure));
        break;
      }
    }
    std::lock_guard lock(mutex_);
    open_.erase(relay->id);
  };
  asio::co_spawn(relay->channel->get_executor(), std::move(run), [](const std::exception_ptr& failure) {
    if (!failure) return;
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      DI_LOG(kError, "router: a relay failed: " << e.what());
    }
  });
  return relay->id;
}

void WorkerPool::abort(int64_t request_id) {
  std::shared_ptr<Relay> relay;
  {
    std::lock_guard lock(mutex_);
    auto it = open_.find(request_id);
    if (it == open_.end()) return;
    relay = it->second;
  }
  // Closing the upstream connection aborts the request on the worker (its KV freed at once); the
  // cancel frees a relay waiting for room in the channel, which its connection no longer reads.
  asio::post(relay->channel->get_executor(), [relay] {
    stop_relay(*relay);
    relay->channel->cancel();
  });
}

std::optional<std::string> WorkerPool::unavailable() const {
  {
    std::lock_guard lock(mutex_);
    if (shutdown_reason_) return shutdown_reason_;
  }
  if (selector_.num_live() == 0) {
    return selector_.num_registered() == 0
               ? "no worker is registered in Redis at " + options_.registry_url +
                     " (start workers with deepinfer serve --register " + options_.registry_url + ")"
               : "every registered worker failed; waiting for a newer heartbeat";
  }
  return std::nullopt;
}

void WorkerPool::shutdown(const std::string& reason) {
  std::vector<std::shared_ptr<Relay>> open;
  {
    std::lock_guard lock(mutex_);
    shutdown_reason_ = reason;
    for (const auto& [id, relay] : open_) open.push_back(relay);
  }
  for (const auto& relay : open) {
    relay->channel->try_send(boost::system::error_code{}, error_event(503, reason));
    asio::post(relay->channel->get_executor(), [relay] { stop_relay(*relay); });
  }
}

}  // namespace deepinfer::server
