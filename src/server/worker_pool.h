// The router's generation backend: runs each request on a cluster worker through the workers'
// token-level API (token_api.h). submit() weighs the tokenised request and hashes its prompt's
// block chain once, the WorkerSelector picks the worker, and a coroutine on the client
// connection's strand sends the token ids and sampling parameters and feeds the worker's events
// into the request's channel, where the public route turns them into the API's response. The
// channel is bounded and the coroutine waits on it, so a slow client slows the read from the
// worker (TCP back-pressure) until the worker's own buffer fills and it aborts the request.
// A disaggregated request (the cluster has prefill and decode workers) runs its prefill on a
// prefill worker, whose first token is relayed at once, then, once that worker reports its KV
// delivered (pushed to the decode worker, or written to the shared store), its decode on the
// decode worker chosen with it; both relays feed the one channel. When the KV did not get there
// (the push failed) or the decode worker fails before its first event, another decode worker (or,
// with none left, a role "both" one) continues the request, computing the prompt again unless the
// shared store holds it. A request with n > 1 runs sample 0 on the prefill worker and all n
// samples on the decode worker (the others fork there); when the prefill worker ends sample 0 at
// its first token, the decode worker runs the request whole.
// A worker that cannot be reached, refuses with 429 / 503, or fails before its first event is
// marked failed (not chosen again until a newer heartbeat) and the request goes to another one,
// up to max_attempts workers; one that fails after events were relayed ends the request with a
// 502 event naming it (a stream ends with the API's error event, never a hang).
// Images: with image encoders registered (serve --role encoder), a request's image files go to the
// least-loaded one first (EncoderSelector), and the worker gets the encoder's rows.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "server/encoder_selector.h"
#include "server/generation_backend.h"
#include "server/metrics.h"
#include "server/worker_selector.h"

namespace deepinfer::server {

struct WorkerPoolOptions {
  std::string registry_url;                   // named in the errors
  std::optional<std::string> worker_api_key;  // sent to the workers' token-level API
  int32_t max_attempts = 3;                   // workers tried before a request that reached none fails
  std::chrono::milliseconds connect_timeout{2000};
  // How a disaggregated request's KV goes from its prefill worker to its decode worker.
  KvTransferMode kv_transfer = KvTransferMode::kPush;
  double request_timeout_s = 600.0;  // how long the policy may hold a request
  // The model's image format (the router's config.json), which says how many rows an image becomes:
  // what an image encoder is weighed by. Null: the model takes no images.
  const ImageInputFormat* image_format = nullptr;
  int64_t row_width = 0;  // the text model's hidden size: an encoder's rows are that wide
};

class WorkerPool : public GenerationBackend {
 public:
  // selector, encoders and metrics (both may be null) must outlive the pool. metrics gets the
  // router's TTFT, inter-token and end-to-end latencies and token counts, as the engine thread
  // records serve's. encoders: a request with images has them encoded by a live image encoder
  // first, and sends its worker the rows instead of the files; with none live (or none that takes
  // them, max_attempts tried) the files go, and the worker encodes them itself.
  WorkerPool(WorkerSelector& selector, EncoderSelector* encoders, Metrics* metrics, WorkerPoolOptions options);
  ~WorkerPool() override;

  Admission submit(Submission submission) override;
  void abort(int64_t request_id) override;
  std::optional<std::string> unavailable() const override;
  void shutdown(const std::string& reason) override;

  struct Relay;     // worker_pool.cpp
  struct Handover;  // worker_pool.cpp

 private:
  // A disaggregated request's body for its prefill worker: where its KV goes.
  std::string prefill_request_body(Relay& relay, const WorkerLease& prefill, const WorkerLease& decode) const;
  // Its decode stage, once the prefill worker is done with the KV (handed over, or lost): relays
  // the decode worker's events and releases its lease. When the KV did not reach `decode`, or
  // `decode` fails before its first event, another decode worker continues (store mode: loading
  // the store's pages; push mode: computing the prompt again), up to max_attempts workers; after
  // events, or with none left, the request ends with a 502 event.
  boost::asio::awaitable<void> run_decode(Relay& relay, WorkerLease decode, Handover& handover);

  // The request's images through an image encoder (encoders_ set, images given) by deadline: false
  // when the request ended on the way (aborted, or a 400 event for an image the encoder refused).
  boost::asio::awaitable<bool> encode_images(Relay& relay, std::chrono::steady_clock::time_point deadline);

  WorkerSelector& selector_;
  EncoderSelector* encoders_;
  Metrics* metrics_;
  WorkerPoolOptions options_;
  mutable std::mutex mutex_;
  std::map<int64_t, std::shared_ptr<Relay>> open_;
  int64_t next_id_ = 1;
  std::optional<std::string> shutdown_reason_;
  std::string transfer_id_prefix_;
};

}  // namespace deepinfer::server
