// The front of a data-parallel server (deepinfer serve --data-parallel-size N): rank 0's HTTP
// server sends each generation request to a rank. Rank 0's own requests run on its worker; another
// rank's are relayed to that rank's HTTP server (the same API) byte for byte, streams included, so
// the client sees one server. The default is the seeds' in-group balancer: the rank with the fewest
// outstanding tokens (what the front sent and has not seen finish: prompt tokens plus n x
// max_tokens), ties broken by fewer requests, then by fewer requests routed so far (idle ranks take
// turns), then the lower rank. Prefix affinity (--data-parallel-routing prefix-affinity) sends a
// request to the rank that most likely holds the longest leading run of its prompt's KV blocks (the
// front remembers the block hashes it sent to each rank, as many as a rank's KV pool holds, least
// recently sent forgotten first), unless that rank is more than the slack busier than the least
// loaded one: then load wins.
// Thread-safe.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/prefix_lru.h"
#include "core/result.h"
#include "engine/prompt_images.h"
#include "kvcache/prefix_hash.h"
#include "server/server_context.h"

namespace deepinfer::server {

struct RankAddress {
  std::string host;
  uint16_t port = 0;
};

enum class RankRouting { kLeastLoaded, kPrefixAffinity };

// "least-loaded" or "prefix-affinity".
Result<RankRouting> parse_rank_routing(std::string_view name);

struct RankRouterOptions {
  RankRouting routing = RankRouting::kLeastLoaded;
  int32_t block_size = 128;  // the ranks' KV page size: affinity counts whole pages, as their caches do
  // Prefix affinity: the prompt blocks remembered per rank (its KV pool's block count) and how many
  // outstanding tokens a rank may be above the least-loaded one and still win a request by its
  // cached prefix (the per-step token budget: about one prefill chunk of extra queue).
  int64_t remembered_blocks_per_rank = 0;
  int64_t affinity_slack_tokens = 0;
};

// One generation request as a front (this one, or the cluster's router) weighs it.
struct RoutedRequest {
  int64_t tokens = 0;                    // prompt tokens + n x max_tokens
  int64_t prompt_tokens = 0;
  std::vector<BlockHash> prompt_blocks;  // the prompt's full-block chain hashes (prefix affinity)
};

// The first 8 bytes of each chain hash (already uniform): the block keys cluster/'s policies and
// PrefixLru take.
std::vector<uint64_t> block_keys(const std::vector<BlockHash>& blocks);

// Weighs a tokenised request and, when block_size > 0, hashes its prompt's full blocks with the
// engines' chain hash, rooted at (model_name, cache_salt) so that tenants never share, each image's
// placeholders named by its hash (image_cache_tokens) so that prompts with different images do not
// pass for one prefix.
RoutedRequest routed_request(std::span<const int32_t> prompt_token_ids, const SamplingParams& sampling,
                             std::string_view model_name, std::string_view cache_salt, int32_t block_size,
                             const std::vector<ImageInput>& images = {});

class RankRouter {
 public:
  // addresses[r]: where rank r's HTTP server listens (rank 0's own is not used).
  RankRouter(std::vector<RankAddress> addresses, RankRouterOptions options = {});

  int32_t num_ranks() const { return static_cast<int32_t>(ranks_.size()); }
  const RankRouterOptions& options() const { return options_; }
  // Picks the rank and counts the request's tokens against it until release().
  int32_t acquire(const RoutedRequest& request);
  void release(int32_t rank, int64_t tokens);
  // Prometheus lines: per-rank outstanding tokens and requests, requests routed (and of those,
  // routed by prefix affinity), and the balance ratio (busiest rank's outstanding tokens over the
  // mean, 1 when idle).
  void render_metrics(std::string& out) const;
  const RankAddress& address(int32_t rank) const { return ranks_[static_cast<size_t>(rank)].address; }

 private:
  struct Rank {
    RankAddress address;
    int64_t outstanding_tokens = 0;
    int32_t outstanding_requests = 0;
    int64_t routed = 0;
    int64_t routed_by_affinity = 0;  // sent here for its prefix where load alone would not have
    // The prompt blocks sent here (block_keys), most recently sent first: a prompt's first block
    // ends most recent, so a rank's cache is modelled evicting a prompt's tail before its head.
    PrefixLru blocks{1};
  };
  RankRouterOptions options_;
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
