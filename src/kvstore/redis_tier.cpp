// Redis tier over hiredis: SET with EX, GET then EXPIRE, EXISTS; reconnect with back-off.
#include "kvstore/redis_tier.h"

#include <hiredis/hiredis.h>

#include <charconv>
#include <cstring>
#include <memory>
#include <vector>

namespace deepinfer {
namespace {

constexpr timeval kConnectTimeout{0, 500'000};
constexpr timeval kCommandTimeout{2, 0};
constexpr auto kReconnectBackoff = std::chrono::seconds(1);

struct ReplyDeleter {
  void operator()(redisReply* reply) const { freeReplyObject(reply); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

std::string page_key(const BlockHash& hash) { return "dikv:" + hash_hex(hash); }

}  // namespace

Result<RedisAddress> parse_redis_url(std::string_view url) {
  constexpr std::string_view kScheme = "redis://";
  if (!url.starts_with(kScheme)) return Error{"Redis URL '" + std::string(url) + "': expected redis://host:port"};
  std::string_view rest = url.substr(kScheme.size());
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  RedisAddress address;
  const size_t colon = rest.rfind(':');
  address.host = std::string(rest.substr(0, colon));
  if (colon != std::string_view::npos) {
    const std::string_view port = rest.substr(colon + 1);
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), address.port);
    if (ec != std::errc() || end != port.data() + port.size() || address.port <= 0 || address.port > 65535) {
      return Error{"Redis URL '" + std::string(url) + "': the port must be a number in [1, 65535]"};
    }
  }
  if (address.host.empty()) return Error{"Redis URL '" + std::string(url) + "': no host"};
  return address;
}

RedisTier::RedisTier(RedisAddress address, const RetentionConfig& retention, HostAllocator& allocator)
    : address_(std::move(address)), retention_(retention), allocator_(allocator) {}

RedisTier::~RedisTier() {
  if (context_ != nullptr) redisFree(context_);
}

redisContext* RedisTier::connection() {
  if (context_ != nullptr) return context_;
  if (std::chrono::steady_clock::now() < retry_after_) return nullptr;
  context_ = redisConnectWithTimeout(address_.host.c_str(), address_.port, kConnectTimeout);
  if (context_ == nullptr || context_->err != 0) {
    fail("cannot connect to redis://" + address_.host + ":" + std::to_string(address_.port) +
         (context_ != nullptr ? std::string(": ") + context_->errstr : std::string()));
    return nullptr;
  }
  redisSetTimeout(context_, kCommandTimeout);
  return context_;
}

void RedisTier::fail(const std::string& what) {
  counters_.errors++;
  if (context_ != nullptr) {
    redisFree(context_);
    context_ = nullptr;
  }
  retry_after_ = std::chrono::steady_clock::now() + kReconnectBackoff;
  warn_rate_limited("redis:" + address_.host + ":" + std::to_string(address_.port),
                    what + " (pages are recomputed instead)");
}

bool RedisTier::contains(const BlockHash& hash) {
  std::lock_guard lock(mutex_);
  redisContext* c = connection();
  if (c == nullptr) return false;
  const std::string key = page_key(hash);
  Reply reply(static_cast<redisReply*>(redisCommand(c, "EXISTS %b", key.data(), key.size())));
  if (!reply || reply->type != REDIS_REPLY_INTEGER) {
    fail("redis EXISTS failed" + (c->err != 0 ? std::string(": ") + c->errstr : std::string()));
    return false;
  }
  return reply->integer == 1;
}

std::optional<SharedPage> RedisTier::get(const BlockHash& hash) {
  std::lock_guard lock(mutex_);
  redisContext* c = connection();
  if (c == nullptr) {
    counters_.misses++;
    return std::nullopt;
  }
  const std::string key = page_key(hash);
  Reply reply(static_cast<redisReply*>(redisCommand(c, "GET %b", key.data(), key.size())));
  if (!reply || (reply->type != REDIS_REPLY_STRING && reply->type != REDIS_REPLY_NIL)) {
    fail("redis GET failed" + (c->err != 0 ? std::string(": ") + c->errstr : std::string()));
    counters_.misses++;
    return std::nullopt;
  }
  if (reply->type == REDIS_REPLY_NIL) {
    counters_.misses++;
    return std::nullopt;
  }
  auto image = std::make_shared<PageBuffer>(reply->len, allocator_);
  std::memcpy(image->data(), reply->str, reply->len);
  // Sliding TTL: the class is in the header; an unreadable header is caught by verification.
  TrafficClass traffic_class = TrafficClass::kDefault;
  if (reply->len >= sizeof(PageHeader)) {
    PageHeader header;
    std::memcpy(&header, reply->str, sizeof(header));
    if (header.traffic_class < kNumTrafficClasses) traffic_class = static_cast<TrafficClass>(header.traffic_class);
  }
  Reply refreshed(static_cast<redisReply*>(
      redisCommand(c, "EXPIRE %b %lld", key.data(), key.size(), static_cast<long long>(retention_.ttl_s(traffic_class)))));
  if (!refreshed) fail("redis EXPIRE failed");
  counters_.hits++;
  counters_.bytes_read += static_cast<int64_t>(image->size());
  return image;
}

bool RedisTier::put(const BlockHash& hash, const PageEntryInfo& info, const SharedPage& image) {
  std::lock_guard lock(mutex_);
  redisContext* c = connection();
  if (c == nullptr) return false;
  const std::string key = page_key(hash);
  Reply reply(static_cast<redisReply*>(redisCommand(c, "SET %b %b EX %lld", key.data(), key.size(), image->data(),
                                                    image->size(),
                                                    static_cast<long long>(retention_.ttl_s(info.traffic_class)))));
  if (!reply || reply->type == REDIS_REPLY_ERROR) {
    fail("redis SET failed" + (reply ? std::string(": ") + std::string(reply->str, reply->len)
                                     : (c->err != 0 ? std::string(": ") + c->errstr : std::string())));
    return false;
  }
  counters_.pages_written++;
  counters_.bytes_written += static_cast<int64_t>(image->size());
  return true;
}

void RedisTier::drop_corrupt(const BlockHash& hash) {
  std::lock_guard lock(mutex_);
  counters_.checksum_failures++;
  redisContext* c = connection();
  if (c == nullptr) return;
  const std::string key = page_key(hash);
  Reply reply(static_cast<redisReply*>(redisCommand(c, "DEL %b", key.data(), key.size())));
  if (!reply) fail("redis DEL failed");
}

TierStats RedisTier::stats() const {
  std::lock_guard lock(mutex_);
  return counters_.snapshot(name());
}

TierCost RedisTier::measure_cost(int64_t probe_bytes) {
  std::lock_guard lock(mutex_);
  TierCost cost;
  redisContext* c = connection();
  if (c == nullptr) return cost;
  const std::string key = "dikv:probe:" + std::to_string(reinterpret_cast<uintptr_t>(this));
  const std::vector<char> bytes(static_cast<size_t>(probe_bytes), 'x');
  Reply set(static_cast<redisReply*>(
      redisCommand(c, "SET %b %b EX 60", key.data(), key.size(), bytes.data(), bytes.size())));
  if (!set || set->type == REDIS_REPLY_ERROR) return cost;
  const auto rtt_start = std::chrono::steady_clock::now();
  Reply ping(static_cast<redisReply*>(redisCommand(c, "PING")));
  const double rtt = std::chrono::duration<double>(std::chrono::steady_clock::now() - rtt_start).count();
  const auto start = std::chrono::steady_clock::now();
  Reply got(static_cast<redisReply*>(redisCommand(c, "GET %b", key.data(), key.size())));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Reply del(static_cast<redisReply*>(redisCommand(c, "DEL %b", key.data(), key.size())));
  if (!got || got->type != REDIS_REPLY_STRING) return cost;
  cost.seconds_per_page = rtt;
  cost.probe = "PING + GET";
  cost.bytes_per_s = static_cast<double>(probe_bytes) / std::max(seconds - rtt, 1e-9);
  return cost;
}

}  // namespace deepinfer
