// The cluster's worker registry in Redis. Each worker (`deepinfer serve --register URL`) keeps one
// key, "<prefix><host:port>", whose value is its WorkerRecord (address, role, model, load) and
// whose expiry is a few heartbeats: a worker that stops heartbeating (killed, hung, cut off)
// disappears from the registry by Redis's own expiry, and a worker that stops cleanly deletes its
// key. Routers (`deepinfer router --redis URL`) list the keys every poll interval.
// Both sides run on their own thread with synchronous hiredis calls (a second's timeout each),
// so a slow or lost Redis never stalls the HTTP threads; during an outage a worker keeps serving
// and a router keeps routing to the workers it last saw, each logging the outage once and the
// recovery once.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/result.h"
#include "server/worker_record.h"

namespace deepinfer::server {

class RedisConnection;  // worker_registry.cpp
class RegistryThread;   // worker_registry.cpp: the thread both sides run

struct RegistryOptions {
  std::string url;  // redis://host:port
  std::string key_prefix = "deepinfer:worker:";
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds key_ttl{3000};
  std::chrono::milliseconds poll_interval{250};
};

// Checks the URL and that a Redis server answers PING there: the error names the URL and why.
Result<void> check_registry(const RegistryOptions& options);

// Worker side: announces the record with the load `load_now()` reports, every heartbeat interval.
class WorkerHeartbeat {
 public:
  using LoadFn = std::function<WorkerLoadReport()>;
  // Registers once before returning (an error if Redis cannot be reached), then heartbeats on its
  // thread until destroyed, which deletes the key.
  static Result<std::unique_ptr<WorkerHeartbeat>> start(RegistryOptions options, WorkerRecord identity,
                                                        LoadFn load_now);
  ~WorkerHeartbeat();
  WorkerHeartbeat(const WorkerHeartbeat&) = delete;
  WorkerHeartbeat& operator=(const WorkerHeartbeat&) = delete;

 private:
  WorkerHeartbeat(RegistryOptions options, WorkerRecord identity, LoadFn load_now);
  Result<void> beat();

  RegistryOptions options_;
  WorkerRecord record_;
  LoadFn load_now_;
  std::unique_ptr<RedisConnection> redis_;
  std::unique_ptr<RegistryThread> thread_;  // last: stopped before the members it uses go
};

// Router side: lists the registry every poll interval and hands each listing to on_listing.
class RegistryWatcher {
 public:
  using ListingFn = std::function<void(const std::vector<WorkerRecord>&)>;
  // Lists once before returning (an error if Redis cannot be reached), then polls on its thread.
  static Result<std::unique_ptr<RegistryWatcher>> start(RegistryOptions options, ListingFn on_listing);
  ~RegistryWatcher();
  RegistryWatcher(const RegistryWatcher&) = delete;
  RegistryWatcher& operator=(const RegistryWatcher&) = delete;

 private:
  RegistryWatcher(RegistryOptions options, ListingFn on_listing);
  Result<std::vector<WorkerRecord>> list();

  RegistryOptions options_;
  ListingFn on_listing_;
  std::unique_ptr<RedisConnection> redis_;
  std::unique_ptr<RegistryThread> thread_;  // last: stopped before the members it uses go
};

}  // namespace deepinfer::server
