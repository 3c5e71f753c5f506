// The front of a data-parallel server (deepinfer serve --data-parallel-size N): rank 0's HTTP
// server sends each generation request to the least-loaded rank, the seeds' in-group balancer.
// Rank 0's own requests run on its worker; another rank's are relayed to that rank's HTTP server
// (the same API) byte for byte, streams included, so the client sees one server. Load is what the
// front itself sent and has not seen finish: outstanding tokens (the request body's bytes / 4 as
// its prompt estimate, plus its max_tokens), ties broken by fewer requests, then by fewer requests
// routed so far (idle ranks take turns), then the lower rank.
// Thread-safe.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "server/server_context.h"

namespace deepinfer::server {

struct RankAddress {
  std::string host;
  uint16_t port = 0;
};

class RankRouter {
 public:
  // addresses[r]: where rank r's HTTP server listens (rank 0's own is not used).
  explicit RankRouter(std::vector<RankAddress> addresses);

  int32_t num_ranks() const { return static_cast<int32_t>(ranks_.size()); }
  // A request's load estimate from its JSON body.
  static int64_t estimate_tokens(const HttpRequest& request);
  // Picks the least-loaded rank and counts tokens against it until release().
  int32_t acquire(int64_t tokens);
  void release(int32_t rank, int64_t tokens);
  // Prometheus lines: per-rank outstanding tokens and requests, requests routed, and the balance
  // ratio (busiest rank's outstanding tokens over the mean, 1 when idle).
  void render_metrics(std::string& out) const;
  const RankAddress& address(int32_t rank) const { return ranks_[static_cast<size_t>(rank)].address; }

 private:
  struct Rank {
    RankAddress address;
    int64_t outstanding_tokens = 0;
    int32_t outstanding_requests = 0;
    int64_t routed = 0;
  };
  mutable std::mutex mutex_;
  std::vector<Rank> ranks_;
};

// Sends request to the rank's HTTP server and relays its whole response to the client as it
// arrives (the upstream connection says Connection: close, so does the relayed response). A rank
// that cannot be reached gets the client a 503 naming it. Returns false: the client connection
// closes after the relay.
boost::asio::awaitable<bool> relay_to_rank(TcpStream& client, const HttpRequest& request, ApiKind kind, int32_t rank,
                                           const RankAddress& address, ServerContext& context);

}  // namespace deepinfer::server
