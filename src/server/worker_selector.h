// The router's choice of worker: the registered workers (the registry's listing, refreshed),
// what the router itself has sent each and not seen finish, and a BalancerPolicy from cluster/
// (the seeds' policy by default) deciding over one InstanceLoad snapshot per live worker. While
// live prefill and decode workers are registered, a request is disaggregated: the policy's
// prefill choice picks its prefill worker and its decode choice its decode worker
// (acquire_decode); otherwise the prefill choice picks among the role "both" workers, which run
// whole requests. A request with n > 1 is not disaggregated: the prefill choice places it whole on
// a decode or role "both" worker, which prefills it itself. A request the policy holds (the
// seeds' quota pull) waits and is offered again, in arrival order, whenever a worker's load drops
// or the listing changes.
// The ranks of a multi-engine worker (WorkerRecord::dp_group) are one DP group to the policy (the
// seeds' quota pull between groups, least-loaded inside one).
// A worker whose key expired is gone from the listing and never chosen again; one the router
// could not reach is marked failed and skipped until a newer heartbeat shows it alive.
// Thread-safe (one mutex; the policy is not).
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cluster/balancer_policy.h"
#include "cluster/prefix_lru.h"
#include "server/rank_router.h"
#include "server/worker_record.h"

namespace deepinfer::server {

// What every worker of a cluster shares with the others and with the router: the KV page size (the
// router hashes prompt blocks in it, prefix affinity counts whole pages, a push needs it equal on
// both ends) and the context length (the router bounds prompt + max_tokens by it).
struct WorkerShape {
  std::optional<int32_t> block_size;
  std::optional<int32_t> max_model_len;
};

struct WorkerSelectorOptions {
  std::string model;  // the served model: workers of another model are ignored
  // The router's --block-size / --max-model-len when given: a worker that differs is refused.
  // Unset fields are taken from the first worker routed to, and later workers must agree with it.
  WorkerShape pinned;
  int64_t remembered_blocks_per_worker = 1 << 16;  // prefix blocks remembered per worker (LRU)
  CostModel cost_model;                            // turns queued prompt tokens into compute time (seeds' quota)
};

// A request placed on a worker: where to send it, and what to give back with release().
struct WorkerLease {
  std::string id;
  std::string host;
  uint16_t port = 0;
  std::string role;      // "both", "prefill" (then a decode lease goes with it) or "decode"
  uint16_t kv_port = 0;  // a decode worker's KV receiver
  int64_t max_body_bytes = 0;  // WorkerRecord::max_body_bytes
  int64_t tokens = 0;
  int64_t prompt_tokens = 0;
  double prefill_ms = 0;
};

class WorkerSelector {
 public:
  WorkerSelector(std::unique_ptr<BalancerPolicy> policy, WorkerSelectorOptions options);

  const WorkerSelectorOptions& options() const { return options_; }
  std::string policy_name() const { return policy_name_; }
  // The workers' KV page size (serve's default before any is known: no request is routed then).
  int32_t block_size() const;
  // The workers' context length: pinned, or that of the workers routed to; nullopt before any.
  std::optional<int32_t> max_model_len() const;

  // The registry's current listing replaces the last one. Returns the lines worth logging (a
  // worker joined, left, serves another model, or disagrees with the shape and is refused).
  // The shape's unpinned fields come from the workers already routed to; once none of them is
  // listed, from the first (by id) of the new ones.
  std::vector<std::string> update(const std::vector<WorkerRecord>& records);
  // The listed workers refused for their block size or context length: "id: why" each.
  std::vector<std::string> refused() const;
  // Sending to the worker failed: skip it until a newer heartbeat.
  void mark_failed(const std::string& id);
  // Registered and not marked failed.
  size_t num_live() const;
  size_t num_registered() const;

  enum class Outcome { kChosen, kHeld, kNoWorker };
  struct Selection {
    Outcome outcome = Outcome::kNoWorker;
    WorkerLease lease;   // kChosen
    int64_t ticket = 0;  // kHeld: ask poll_held with it
  };
  // Chooses among the live workers not in `exclude` (those that already failed this request): a
  // prefill worker while the cluster is disaggregated (for n > 1 a decode or role "both" one, which
  // runs it whole), else a role "both" one.
  Selection acquire(const RoutedRequest& request, const std::vector<std::string>& exclude = {});
  // A disaggregated request's decode worker (the policy's decode choice, never held), or nullopt
  // when no live decode worker outside `exclude` is left. Its lease is released like the other.
  // recomputes_prompt: the prompt's KV did not reach a decode worker, so the one chosen computes
  // the prompt again (its compute counts on it), and a role "both" worker may take it when no
  // decode worker is left.
  std::optional<WorkerLease> acquire_decode(const RoutedRequest& request, const std::vector<std::string>& exclude = {},
                                            bool recomputes_prompt = false);
  // A held request: kChosen once a retry placed it, kHeld while it waits, kNoWorker when no live
  // worker is left to wait for (the ticket is then forgotten).
  Selection poll_held(int64_t ticket);
  // Forgets a held request (its client left or it timed out).
  void cancel_held(int64_t ticket);
  // The request ended (or never reached the worker): its load leaves the worker.
  void release(const WorkerLease& lease);

  // Prometheus lines: workers registered and live, requests held, and per worker (label
  // worker="host:port") the router's outstanding tokens and requests, requests routed, failures,
  // and the worker's own reported queue, running requests and KV usage; the balance ratio
  // (busiest outstanding tokens over the mean, 1 when idle).
  void render_metrics(std::string& out) const;

 private:
  struct Worker {
    WorkerRecord record;
    bool failed = false;
    int64_t failed_at_heartbeat = 0;
    int64_t outstanding_tokens = 0;
    int64_t outstanding_prompt_tokens = 0;
    int32_t outstanding_requests = 0;
    double outstanding_prefill_ms = 0;
    int64_t routed = 0;
    int64_t failures = 0;
    PrefixLru remembered{0};
  };
  struct Held {
    int64_t ticket = 0;
    RoutedRequest request;
    std::vector<std::string> exclude;
  };

  // Live prefill and live decode workers are registered.
  bool disaggregated_locked() const;
  int32_t block_size_locked() const;
  // Why the record cannot join workers of `shape`, or nullopt.
  std::optional<std::string> shape_mismatch(const WorkerShape& shape, const WorkerRecord& record) const;
  InstanceLoad load_of(const Worker& worker, std::span<const uint64_t> reusable_blocks) const;
  // Sorts the candidates into the order the policy sees them (a multi-engine worker's ranks
  // consecutive) and returns their loads in it, each rank with its DP group's number.
  std::vector<InstanceLoad> loads_in_policy_order(std::vector<Worker*>& candidates,
                                                  std::span<const uint64_t> reusable_blocks) const;
  // Counts the request on the worker; computes_prompt: its prompt runs there (not a decode of KV
  // that a prefill worker computed).
  WorkerLease lease_on_locked(Worker& chosen, const RoutedRequest& request, int64_t cached_tokens,
                              bool computes_prompt);
  std::optional<WorkerLease> choose_locked(const RoutedRequest& request, const std::vector<std::string>& exclude,
                                           bool is_retry, bool* no_worker);
  void retry_held_locked();
  double now_ms() const;

  std::unique_ptr<BalancerPolicy> policy_;
  std::string policy_name_;
  WorkerSelectorOptions options_;
  mutable std::mutex mutex_;
  std::map<std::string, Worker> workers_;       // by id: a fixed order for the policy
  std::map<std::string, std::string> refused_;  // listed workers of another shape, with why
  WorkerShape shape_;                           // pinned, or taken from the workers routed to
  std::list<Held> held_;                        // arrival order
  std::map<int64_t, Selection> placed_;         // held requests a retry placed, until polled
  int64_t next_ticket_ = 1;
  int64_t routed_total_ = 0;
};

}  // namespace deepinfer::server
