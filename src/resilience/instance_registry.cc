// Copyright tollgate authors.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "src/store/redis/redis_url.h"
#include "src/store/redis/router.h"
#include "src/store/redis/slot.h"
#include "tollgate/resilience.h"

namespace tollgate {
namespace {

// KEYS[1] = the set; ARGV[1] = instance id, ARGV[2] = instance TTL in microseconds.
// Time comes from Redis, so instances' clocks do not matter.
constexpr char kHeartbeatScript[] = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
redis.call('PEXPIRE', KEYS[1], math.ceil(ttl / 1000) * 2)
return redis.call('ZCARD', KEYS[1])
)lua";

std::string DefaultInstanceId() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::random_device random;
  return absl::StrCat(host, ":", getpid(), ":", random() % 1000000);
}

class RedisInstanceRegistry final : public InstanceRegistry {
 public:
  RedisInstanceRegistry(InstanceRegistryOptions options, redis::RedisTarget target)
      : options_(std::move(options)),
        target_(std::move(target)),
        slot_(redis::KeySlot(options_.key)) {
    if (options_.instance_id.empty()) options_.instance_id = DefaultInstanceId();
  }

  ~RedisInstanceRegistry() override {
    {
      absl::MutexLock lock(&mutex_);
      stopping_ = true;
      wake_.Signal();
    }
    if (thread_.joinable()) thread_.join();
    // Leave the set at once, so the others' share grows without waiting for the TTL.
    if (client_ != nullptr && options_.announce) {
      (void)client_->Command({"ZREM", options_.key, options_.instance_id}, slot_);
    }
  }

  void StartThread() {
    Probe();
    thread_ = std::thread([this] { Loop(); });
  }

  int64_t Count() const override { return count_.load(std::memory_order_relaxed); }
  bool StoreReachable() const override { return reachable_.load(std::memory_order_relaxed); }
  const std::string& instance_id() const override { return options_.instance_id; }

 private:
  void Loop() {
    const int64_t period_ms = std::min(options_.heartbeat_interval_ms, options_.probe_interval_ms);
    absl::MutexLock lock(&mutex_);
    while (!stopping_) {
      wake_.WaitWithTimeout(&mutex_, absl::Milliseconds(period_ms));
      if (stopping_) break;
      mutex_.Unlock();
      Probe();
      mutex_.Lock();
    }
  }

  // One probe: the heartbeat when one is due (or the last probe failed), else PING. On any
  // failure the last known count stays.
  void Probe() {
    const auto now = std::chrono::steady_clock::now();
    const bool heartbeat_due =
        options_.announce &&
        (!reachable_.load(std::memory_order_relaxed) ||
         now - last_heartbeat_ >= std::chrono::milliseconds(options_.heartbeat_interval_ms));
    absl::StatusOr<int64_t> count = heartbeat_due ? Heartbeat() : Ping();
    SetReachable(count.status());
    if (count.ok() && heartbeat_due) {
      last_heartbeat_ = now;
      UpdateCount(*count);
    }
  }

  absl::Status Connect() {
    if (client_ != nullptr) return absl::OkStatus();
    // A router, so the one key goes to its slot's node in a cluster and to the current
    // primary under Sentinel. Its own short timeouts: it is the readiness probe.
    redis::RouterOptions router_options;
    router_options.client.connection.connect_timeout =
        std::chrono::milliseconds(options_.probe_timeout_ms);
    router_options.client.connection.reply_timeout =
        std::chrono::milliseconds(options_.probe_timeout_ms);
    router_options.client.connection.reconnect_max =
        std::chrono::milliseconds(std::max<int64_t>(20, options_.probe_interval_ms));
    router_options.client.connections = 1;
    absl::StatusOr<std::unique_ptr<redis::Router>> client =
        redis::Router::Connect(target_, router_options);
    if (!client.ok()) return client.status();
    client_ = std::move(*client);
    return absl::OkStatus();
  }

  // The live count, or why Redis did not answer.
  absl::StatusOr<int64_t> Heartbeat() {
    if (absl::Status connected = Connect(); !connected.ok()) return connected;
    absl::StatusOr<redis::RedisReply> reply =
        client_->Command({"EVAL", kHeartbeatScript, "1", options_.key, options_.instance_id,
                          absl::StrCat(options_.instance_ttl_ms * 1000)},
                         slot_);
    if (!reply.ok()) return reply.status();
    if (reply->type != redis::RedisReply::Type::kInteger || reply->integer < 1) {
      return absl::UnavailableError(absl::StrCat("heartbeat: unexpected reply ", reply->str));
    }
    return reply->integer;
  }

  void UpdateCount(int64_t count) {
    // Right after Redis returns (restarted empty, every instance re-announcing within a
    // heartbeat), a smaller count is not believed until the instances had time to announce.
    const int64_t previous = count_.load(std::memory_order_relaxed);
    if (count < previous && std::chrono::steady_clock::now() - reachable_since_ <
                                std::chrono::milliseconds(options_.instance_ttl_ms)) {
      return;
    }
    count_.store(count, std::memory_order_relaxed);
    if (previous != count && options_.on_event) {
      ResilienceEvent event;
      event.kind = ResilienceEvent::Kind::kInstanceCountChanged;
      event.count = count;
      event.previous = previous;
      options_.on_event(event);
    }
  }

  absl::StatusOr<int64_t> Ping() {
    if (absl::Status connected = Connect(); !connected.ok()) return connected;
    absl::StatusOr<redis::RedisReply> reply = client_->Command({"PING"}, slot_);
    if (!reply.ok()) return reply.status();
    if (reply->type == redis::RedisReply::Type::kError) {
      return absl::UnavailableError(absl::StrCat("PING: ", reply->str));
    }
    return 0;
  }

  void SetReachable(const absl::Status& status) {
    const bool reachable = status.ok();
    const bool changed = reachable_.exchange(reachable, std::memory_order_relaxed) != reachable;
    const bool first = !std::exchange(first_probe_done_, true);
    // The first probe reports only a failure: "reachable" is what a start assumes.
    if (first ? reachable : !changed) return;
    if (reachable) reachable_since_ = std::chrono::steady_clock::now();
    if (!options_.on_event) return;
    ResilienceEvent event;
    event.kind = reachable ? ResilienceEvent::Kind::kStoreReachable
                           : ResilienceEvent::Kind::kStoreUnreachable;
    event.detail = std::string(status.message());
    options_.on_event(event);
  }

  InstanceRegistryOptions options_;
  const redis::RedisTarget target_;
  const int slot_;                         // the hash slot of options_.key
  std::unique_ptr<redis::Router> client_;  // used by the heartbeat thread only
  std::atomic<int64_t> count_{1};
  std::atomic<bool> reachable_{false};
  // Used by the probing thread only (the first probe runs in Start, before it exists).
  bool first_probe_done_ = false;
  std::chrono::steady_clock::time_point last_heartbeat_;
  // When Redis last became reachable again after a failed probe (the epoch if never).
  std::chrono::steady_clock::time_point reachable_since_;
  absl::Mutex mutex_;
  absl::CondVar wake_;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  std::thread thread_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<InstanceRegistry>> InstanceRegistry::Start(
    InstanceRegistryOptions options) {
  absl::StatusOr<redis::RedisTarget> target = redis::ParseRedisTarget(options.redis_url);
  if (!target.ok()) return target.status();
  if (options.heartbeat_interval_ms < 10) {
    return absl::InvalidArgumentError("heartbeat_interval_ms must be >= 10");
  }
  if (options.probe_interval_ms < 10 || options.probe_timeout_ms < 10) {
    return absl::InvalidArgumentError("probe_interval_ms and probe_timeout_ms must be >= 10");
  }
  if (options.instance_ttl_ms <= options.heartbeat_interval_ms) {
    return absl::InvalidArgumentError("instance_ttl_ms must be longer than the heartbeat");
  }
  auto registry = std::make_unique<RedisInstanceRegistry>(std::move(options), std::move(*target));
  registry->StartThread();
  return std::unique_ptr<InstanceRegistry>(std::move(registry));
}

}  // namespace tollgate
