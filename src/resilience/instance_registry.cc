// Copyright tollgate authors.
#include <unistd.h>

#include <atomic>
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
    if (client_ != nullptr) {
      (void)client_->Command({"ZREM", options_.key, options_.instance_id}, slot_);
    }
  }

  void StartThread() {
    Heartbeat();
    thread_ = std::thread([this] { Loop(); });
  }

  int64_t Count() const override { return count_.load(std::memory_order_relaxed); }
  const std::string& instance_id() const override { return options_.instance_id; }

 private:
  void Loop() {
    absl::MutexLock lock(&mutex_);
    while (!stopping_) {
      wake_.WaitWithTimeout(&mutex_, absl::Milliseconds(options_.heartbeat_interval_ms));
      if (stopping_) break;
      mutex_.Unlock();
      Heartbeat();
      mutex_.Lock();
    }
  }

  // One heartbeat; on any failure the last known count stays.
  void Heartbeat() {
    if (client_ == nullptr) {
      // A router, so the one key goes to its slot's node in a cluster and to the current
      // primary under Sentinel.
      redis::RouterOptions router_options;
      router_options.client.connection.connect_timeout =
          std::chrono::milliseconds(options_.heartbeat_interval_ms);
      router_options.client.connections = 1;
      absl::StatusOr<std::unique_ptr<redis::Router>> client =
          redis::Router::Connect(target_, router_options);
      if (!client.ok()) return;
      client_ = std::move(*client);
    }
    absl::StatusOr<redis::RedisReply> reply =
        client_->Command({"EVAL", kHeartbeatScript, "1", options_.key, options_.instance_id,
                          absl::StrCat(options_.instance_ttl_ms * 1000)},
                         slot_);
    if (reply.ok() && reply->type == redis::RedisReply::Type::kInteger && reply->integer >= 1) {
      count_.store(reply->integer, std::memory_order_relaxed);
    }
  }

  InstanceRegistryOptions options_;
  const redis::RedisTarget target_;
  const int slot_;                         // the hash slot of options_.key
  std::unique_ptr<redis::Router> client_;  // used by the heartbeat thread only
  std::atomic<int64_t> count_{1};
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
  if (options.instance_ttl_ms <= options.heartbeat_interval_ms) {
    return absl::InvalidArgumentError("instance_ttl_ms must be longer than the heartbeat");
  }
  auto registry = std::make_unique<RedisInstanceRegistry>(std::move(options), std::move(*target));
  registry->StartThread();
  return std::unique_ptr<InstanceRegistry>(std::move(registry));
}

}  // namespace tollgate
