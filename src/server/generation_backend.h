// What the generation routes run requests on: the local engine thread (EngineWorker) in
// `deepinfer serve`, or the cluster's workers over the token-level API (WorkerPool) in
// `deepinfer router`. The routes render and tokenise the request, submit its token ids and
// sampling parameters, and turn the events that come back into the API's response, so a router
// answers byte for byte as a worker would.
#pragma once

#include <boost/asio/experimental/concurrent_channel.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/result.h"
#include "engine/engine_core.h"

namespace deepinfer::server {

// One message to a request's connection: an engine output, or why the request ended without
// finishing (its last message).
struct EngineEvent {
  RequestOutput output;
  std::optional<Error> error;
  // The HTTP status of error: 400 the engine refused the request (add_request failed; nothing of
  // it ran), 429 the worker that was to run it is overloaded, 500 a step failed while running it,
  // 502 the worker running it failed, 503 the server lost its device or shuts down.
  int error_status = 400;
  // A PROMPT engine's request whose prefill is done (the event that carries its first token,
  // finish reason kPrefilled): what the decode side continues from (a prefill worker's token API
  // sends it on). Not on the wire.
  std::shared_ptr<const PrefilledRequest> prefilled{};
  // The seed a prefill worker's first token was drawn with, which the decode side goes on with: on
  // the event with the first token (so the router knows it even if the worker fails next), and on
  // the worker's last event for the request, which says whether the KV got there. Without an error
  // it reached the decode worker (or the shared store); with a 502 error it did not, and another
  // decode worker computes the prompt again.
  std::optional<uint64_t> first_token_seed{};
};

using OutputChannel = boost::asio::experimental::concurrent_channel<void(boost::system::error_code, EngineEvent)>;

// How a prefilled request's KV reaches the decode worker (docs/cluster.md): pushed to it
// (kv_transport.h), or through the persistent KV store's shared tier.
enum class KvTransferMode : uint8_t { kPush, kStore };

// A prefill worker's request: where its KV goes once the prefill is done.
struct KvHandoff {
  KvTransferMode mode = KvTransferMode::kPush;
  std::string transfer_id;  // kPush: the name the decode worker keeps it under
  std::string host;         // kPush: the decode worker's KV receiver
  uint16_t port = 0;
};

// A decode worker's request: the prefill ran elsewhere; its first token, and where its KV is.
struct PrefilledSource {
  KvTransferMode mode = KvTransferMode::kPush;
  std::string transfer_id;  // kPush: the entry of the worker's PrefilledInbox
  int32_t first_token = 0;
  // The prompt's KV never reached a decode worker (the push failed, or the decode worker it went
  // to failed before running the request): this worker computes the prompt again, whatever the
  // mode. A role "both" worker takes such a request too.
  bool kv_lost = false;
};

struct Submission {
  std::vector<int32_t> prompt_token_ids;
  SamplingParams params;
  int32_t priority = 0;
  std::string cache_salt;
  std::shared_ptr<OutputChannel> channel;  // receives every output; the backend keeps it alive
  TrafficClass kv_cache_class = TrafficClass::kDefault;
  std::optional<KvHandoff> kv_handoff{};       // a prefill worker's request
  std::optional<PrefilledSource> continues{};  // a decode worker's request
  // A decode worker's request, resolved from `continues` by the token API (its KV pushed, or to
  // be loaded from the store): the backend continues it instead of running the prompt. Not on
  // the wire.
  std::shared_ptr<PrefilledRequest> prefilled{};
  // A prefill worker's pushed request: where its KV goes while the prefill runs (the token API's
  // push stream, kv_transport.h). Not on the wire.
  std::shared_ptr<PrefillKvSink> kv_sink{};
  // A multimodal model's images at their placeholders (ApiRequest::images). On the wire as each
  // image's file (ImageInput::file), which the worker preprocesses for its own model.
  std::vector<ImageInput> images{};
};

// Why submit turned a request away.
struct Refusal {
  bool overloaded = false;  // the queue is full: retry later (429 / 529); else unavailable (503)
  std::string message;
};

// submit's answer: the request id, or the refusal.
using Admission = std::variant<int64_t, Refusal>;

class GenerationBackend {
 public:
  virtual ~GenerationBackend() = default;
  // Thread-safe. Takes the request or refuses it at once; a request taken gets its outputs (or
  // its error) on submission.channel.
  virtual Admission submit(Submission submission) = 0;
  // Thread-safe. Cancels a request at any point; the backend frees what it holds at once.
  virtual void abort(int64_t request_id) = 0;
  // Thread-safe: why every request is refused now (/health answers 503 with it), or nullopt.
  virtual std::optional<std::string> unavailable() const = 0;
  // Thread-safe. Refuses new requests with reason (503) and ends every open one with a 503 event.
  virtual void shutdown(const std::string& reason) = 0;
};

}  // namespace deepinfer::server
