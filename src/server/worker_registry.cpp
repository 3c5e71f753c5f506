// The registry's Redis side: one synchronous hiredis connection per thread, reconnected on the
// next tick after any failure.
#include "server/worker_registry.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "core/logging.h"
#include "kvstore/redis_tier.h"

namespace deepinfer::server {

namespace {

struct ReplyDeleter {
  void operator()(redisReply* reply) const { freeReplyObject(reply); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

constexpr timeval kTimeout{1, 0};

}  // namespace

// Runs tick every interval until destroyed. A failing tick is an outage: logged once with the
// error and what the caller keeps doing meanwhile, and the first success after it once.
class RegistryThread {
 public:
  RegistryThread(std::chrono::milliseconds interval, std::function<Result<void>()> tick, std::string while_out,
                 std::string recovered)
      : interval_(interval),
        tick_(std::move(tick)),
        while_out_(std::move(while_out)),
        recovered_(std::move(recovered)),
        thread_([this] { loop(); }) {}
  ~RegistryThread() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }
  RegistryThread(const RegistryThread&) = delete;
  RegistryThread& operator=(const RegistryThread&) = delete;

 private:
  void loop() {
    std::unique_lock lock(mutex_);
    while (!wake_.wait_for(lock, interval_, [&] { return stop_; })) {
      lock.unlock();
      const Result<void> result = tick_();
      lock.lock();
      if (!result.ok() && !outage_logged_) {
        DI_LOG(kWarn, "registry: " << result.error().message << "; " << while_out_);
        outage_logged_ = true;
      } else if (result.ok() && outage_logged_) {
        DI_LOG(kWarn, "registry: " << recovered_);
        outage_logged_ = false;
      }
    }
  }

  const std::chrono::milliseconds interval_;
  const std::function<Result<void>()> tick_;
  const std::string while_out_;
  const std::string recovered_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool outage_logged_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

class RedisConnection {
 public:
  explicit RedisConnection(RedisAddress address) : address_(std::move(address)) {}
  ~RedisConnection() { drop(); }

  std::string url() const { return "redis://" + address_.host + ":" + std::to_string(address_.port); }

  // Runs one command (argv form); the error names the URL and what failed. A failure drops the
  // connection, so the next command reconnects.
  Result<Reply> command(const std::vector<std::string>& args) {
    if (context_ == nullptr) {
      context_ = redisConnectWithTimeout(address_.host.c_str(), address_.port, kTimeout);
      if (context_ == nullptr || context_->err != 0) {
        const std::string why = context_ != nullptr ? context_->errstr : "out of memory";
        drop();
        return Error{"cannot connect to Redis at " + url() + ": " + why};
      }
      redisSetTimeout(context_, kTimeout);
    }
    std::vector<const char*> argv;
    std::vector<size_t> lengths;
    for (const std::string& arg : args) {
      argv.push_back(arg.data());
      lengths.push_back(arg.size());
    }
    Reply reply(static_cast<redisReply*>(
        redisCommandArgv(context_, static_cast<int>(args.size()), argv.data(), lengths.data())));
    if (reply == nullptr) {
      const std::string why = context_->errstr;
      drop();
      return Error{"Redis at " + url() + " failed '" + args[0] + "': " + why};
    }
    if (reply->type == REDIS_REPLY_ERROR) {
      return Error{"Redis at " + url() + " refused '" + args[0] + "': " + std::string(reply->str, reply->len)};
    }
    return reply;
  }

 private:
  void drop() {
    if (context_ != nullptr) redisFree(context_);
    context_ = nullptr;
  }

  RedisAddress address_;
  redisContext* context_ = nullptr;
};

namespace {

Result<std::unique_ptr<RedisConnection>> connect(const RegistryOptions& options) {
  auto address = parse_redis_url(options.url);
  if (!address.ok()) return address.error();
  auto connection = std::make_unique<RedisConnection>(std::move(*address));
  auto pong = connection->command({"PING"});
  if (!pong.ok()) return pong.error();
  return connection;
}

}  // namespace

Result<void> check_registry(const RegistryOptions& options) {
  auto connection = connect(options);
  if (!connection.ok()) return connection.error();
  return {};
}

WorkerHeartbeat::WorkerHeartbeat(RegistryOptions options, WorkerRecord identity, LoadFn load_now)
    : options_(std::move(options)), record_(std::move(identity)), load_now_(std::move(load_now)) {}

Result<std::unique_ptr<WorkerHeartbeat>> WorkerHeartbeat::start(RegistryOptions options, WorkerRecord identity,
                                                                LoadFn load_now) {
  auto connection = connect(options);
  if (!connection.ok()) return connection.error();
  std::unique_ptr<WorkerHeartbeat> heartbeat(
      new WorkerHeartbeat(std::move(options), std::move(identity), std::move(load_now)));
  heartbeat->redis_ = std::move(*connection);
  if (auto first = heartbeat->beat(); !first.ok()) return first.error();
  heartbeat->thread_ = std::make_unique<RegistryThread>(
      heartbeat->options_.heartbeat_interval, [raw = heartbeat.get()] { return raw->beat(); },
      "still serving, but routers drop this worker once its key expires; retrying every heartbeat",
      "Redis at " + std::string(heartbeat->redis_->url()) + " answers again; worker " + heartbeat->record_.id +
          " registered again");
  return heartbeat;
}

WorkerHeartbeat::~WorkerHeartbeat() {
  thread_.reset();
  // Deregistering at once spares the routers a key-expiry's wait; a failure here changes nothing,
  // the key expires anyway.
  if (redis_ != nullptr) (void)redis_->command({"DEL", options_.key_prefix + record_.id});
}

Result<void> WorkerHeartbeat::beat() {
  ++record_.heartbeat;
  record_.load = load_now_();
  auto reply = redis_->command({"SET", options_.key_prefix + record_.id, worker_record_to_json(record_).dump(), "PX",
                                std::to_string(options_.key_ttl.count())});
  if (!reply.ok()) return reply.error();
  return {};
}

RegistryWatcher::RegistryWatcher(RegistryOptions options, ListingFn on_listing)
    : options_(std::move(options)), on_listing_(std::move(on_listing)) {}

Result<std::unique_ptr<RegistryWatcher>> RegistryWatcher::start(RegistryOptions options, ListingFn on_listing) {
  auto connection = connect(options);
  if (!connection.ok()) return connection.error();
  std::unique_ptr<RegistryWatcher> watcher(new RegistryWatcher(std::move(options), std::move(on_listing)));
  watcher->redis_ = std::move(*connection);
  auto first = watcher->list();
  if (!first.ok()) return first.error();
  watcher->on_listing_(*first);
  watcher->thread_ = std::make_unique<RegistryThread>(
      watcher->options_.poll_interval,
      [raw = watcher.get()]() -> Result<void> {
        auto listing = raw->list();
        if (!listing.ok()) return listing.error();
        raw->on_listing_(*listing);
        return {};
      },
      "routing to the workers last listed until Redis answers again",
      "Redis at " + std::string(watcher->redis_->url()) + " answers again");
  return watcher;
}

RegistryWatcher::~RegistryWatcher() = default;

Result<std::vector<WorkerRecord>> RegistryWatcher::list() {
  std::vector<std::string> keys;
  std::string cursor = "0";
  do {
    auto reply = redis_->command({"SCAN", cursor, "MATCH", options_.key_prefix + "*", "COUNT", "1000"});
    if (!reply.ok()) return reply.error();
    const redisReply* r = reply->get();
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) return Error{"Redis SCAN answered an unexpected shape"};
    cursor.assign(r->element[0]->str, r->element[0]->len);
    for (size_t i = 0; i < r->element[1]->elements; ++i) {
      keys.emplace_back(r->element[1]->element[i]->str, r->element[1]->element[i]->len);
    }
  } while (cursor != "0");
  std::vector<WorkerRecord> records;
  if (keys.empty()) return records;
  std::vector<std::string> mget{"MGET"};
  mget.insert(mget.end(), keys.begin(), keys.end());
  auto reply = redis_->command(mget);
  if (!reply.ok()) return reply.error();
  const redisReply* r = reply->get();
  for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; ++i) {
    const redisReply* value = r->element[i];
    if (value->type != REDIS_REPLY_STRING) continue;  // expired between SCAN and MGET
    const auto json = nlohmann::json::parse(std::string(value->str, value->len), nullptr, false);
    auto record = worker_record_from_json(json);
    if (!record.ok()) {
      DI_LOG(kWarn, "registry: key " << keys[i] << ": " << record.error().message << "; skipped");
      continue;
    }
    records.push_back(std::move(*record));
  }
  return records;
}

}  // namespace deepinfer::server
