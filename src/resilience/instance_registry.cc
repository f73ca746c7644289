// Copyright tollgate authors. InstanceRegistry (tollgate/resilience.h): N and Redis' reachability
// learned by probes on the timers; the commands and their replies are redis::InstanceSet's.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "src/core/timer_task.h"
#include "src/resilience/fallback_shares_impl.h"
#include "src/store/redis/instance_set.h"
#include "tollgate/resilience.h"

namespace tollgate {
namespace {

std::string DefaultInstanceId() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::random_device random;
  return absl::StrCat(host, ":", getpid(), ":", random() % 1000000);
}

class RedisInstanceRegistry final : public InstanceRegistry {
 public:
  // REQUIRES: options.instance_id set.
  RedisInstanceRegistry(InstanceRegistryOptions options,
                        std::shared_ptr<RedisConnections> connections,
                        std::shared_ptr<Timers> timers)
      : options_(std::move(options)),
        timers_(std::move(timers)),
        set_(std::move(connections), {.key = options_.key,
                                      .instance_id = options_.instance_id,
                                      .instance_ttl_ms = options_.instance_ttl_ms,
                                      .demand_period_ms = options_.demand_period_ms}) {}

  ~RedisInstanceRegistry() override {
    // A probe in progress uses the registry until it is settled (answered or timed out).
    if (task_ != nullptr) task_->StopAndWait();
    // Leave the set at once, so the others' share grows without waiting for the TTL.
    if (options_.announce) set_.Leave();
  }

  // The first probe, before this returns; then one every period, on the timers. With shared
  // connections all of it runs on one of their threads (a loop of a service), so that every
  // probe, its reply and its deadline stay there.
  // REQUIRES: not on one of the connections' threads.
  void Start() {
    const int64_t period_micros =
        std::min(options_.heartbeat_interval_ms, options_.probe_interval_ms) * 1000;
    task_ = std::make_unique<internal::TimerTask>(timers_, [this, period_micros](
                                                               internal::TimerTask::Next next) {
      Probe([next = std::move(next), period_micros]() mutable { std::move(next)(period_micros); });
    });
    absl::Notification started;
    absl::AnyInvocable<void()&&> first = [this, &started, period_micros] {
      Probe([start = task_->Starter(period_micros), &started]() mutable {
        std::move(start)();
        started.Notify();
      });
    };
    set_.Post(std::move(first));
    started.WaitForNotification();
  }

  int64_t Count() const override { return count_.load(std::memory_order_relaxed); }
  bool StoreReachable() const override { return reachable_.load(std::memory_order_relaxed); }
  const std::string& instance_id() const override { return options_.instance_id; }

 private:
  // What one probe shares with its reply and its deadline, whichever comes first; the other
  // finds it answered and touches nothing else (the registry may be gone by then).
  struct ProbeCall {
    std::atomic<bool> answered{false};
    redis::InstanceSet::Reply answer;
  };

  // One probe: the heartbeat when one is due (or the last probe failed), else PING; it fails
  // when no reply comes within probe_timeout_ms. On any failure the last known count stays.
  // `done` runs once it is settled, on the thread that settled it.
  void Probe(absl::AnyInvocable<void() &&> done) {
    const int64_t now = timers_->NowMicros();
    const bool heartbeat_due =
        options_.announce && (!reachable_.load(std::memory_order_relaxed) ||
                              now - last_heartbeat_micros_.load(std::memory_order_relaxed) >=
                                  options_.heartbeat_interval_ms * 1000);
    auto call = std::make_shared<ProbeCall>();
    resilience::FallbackSharesImpl* const shares =
        heartbeat_due && options_.fallback_shares != nullptr
            ? &resilience::HeartbeatSide(*options_.fallback_shares)
            : nullptr;
    // Units counted since the last heartbeat; lost if this one fails (the fleet's totals
    // may or may not hold them: counted nowhere is the side that admits less).
    resilience::FallbackSharesImpl::Counts reported;
    if (shares != nullptr) reported = shares->TakeCounts();
    redis::InstanceSet::Send send = set_.Ping();
    if (heartbeat_due) {
      const redis::InstanceSet::Demand demand = {
          .learned_period = shares != nullptr ? shares->period() : -1, .units = &reported};
      send = set_.Heartbeat(shares != nullptr ? &demand : nullptr);
    }
    call->answer = [this, heartbeat_due, now, shares, reported = std::move(reported),
                    done =
                        std::move(done)](absl::StatusOr<redis::HeartbeatReply> heartbeat) mutable {
      SetReachable(heartbeat.status());
      if (heartbeat.ok() && heartbeat_due) {
        last_heartbeat_micros_.store(now, std::memory_order_relaxed);
        UpdateCount(heartbeat->count);
        if (shares != nullptr) {
          shares->Learn(heartbeat->period, heartbeat->created, reported,
                        heartbeat->has_previous ? &heartbeat->previous : nullptr);
        }
      }
      std::move(done)();
    };
    timers_->RunAfter(options_.probe_timeout_ms * 1000, &call->answered, [call] {
      if (call->answered.exchange(true)) return;
      std::move(call->answer)(absl::DeadlineExceededError("no reply within probe_timeout_ms"));
    });
    std::move(send)([call](absl::StatusOr<redis::HeartbeatReply> heartbeat) {
      if (call->answered.exchange(true)) return;
      std::move(call->answer)(std::move(heartbeat));
    });
  }

  void UpdateCount(int64_t count) {
    // Right after Redis returns (restarted empty, every instance re-announcing within a
    // heartbeat), a smaller count is not believed until the instances had time to announce.
    const int64_t previous = count_.load(std::memory_order_relaxed);
    if (count < previous &&
        timers_->NowMicros() - reachable_since_micros_ < options_.instance_ttl_ms * 1000) {
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

  void SetReachable(const absl::Status& status) {
    const bool reachable = status.ok();
    const bool changed = reachable_.exchange(reachable, std::memory_order_relaxed) != reachable;
    const bool first = !std::exchange(first_probe_done_, true);
    // The first probe reports only a failure: "reachable" is what a start assumes.
    if (first ? reachable : !changed) return;
    if (reachable) reachable_since_micros_ = timers_->NowMicros();
    if (!options_.on_event) return;
    ResilienceEvent event;
    event.kind = reachable ? ResilienceEvent::Kind::kStoreReachable
                           : ResilienceEvent::Kind::kStoreUnreachable;
    event.detail = std::string(status.message());
    options_.on_event(event);
  }

  const InstanceRegistryOptions options_;
  const std::shared_ptr<Timers> timers_;
  const redis::InstanceSet set_;
  std::atomic<int64_t> count_{1};
  std::atomic<bool> reachable_{false};
  std::atomic<int64_t> last_heartbeat_micros_{0};  // the timers' time
  // Used by one probe at a time (the first runs in Start, before the task exists).
  bool first_probe_done_ = false;
  // When Redis last became reachable again after a failed probe (the timers' time).
  int64_t reachable_since_micros_ = std::numeric_limits<int64_t>::min() / 2;
  // Set once by Start.
  std::unique_ptr<internal::TimerTask> task_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<InstanceRegistry>> InstanceRegistry::Start(
    InstanceRegistryOptions options) {
  if (options.heartbeat_interval_ms < 10) {
    return absl::InvalidArgumentError("heartbeat_interval_ms must be >= 10");
  }
  if (options.probe_interval_ms < 10 || options.probe_timeout_ms < 10) {
    return absl::InvalidArgumentError("probe_interval_ms and probe_timeout_ms must be >= 10");
  }
  if (options.instance_ttl_ms <= options.heartbeat_interval_ms) {
    return absl::InvalidArgumentError("instance_ttl_ms must be longer than the heartbeat");
  }
  if (options.fallback_shares != nullptr &&
      options.demand_period_ms < 2 * options.heartbeat_interval_ms) {
    return absl::InvalidArgumentError(
        "demand_period_ms must be at least twice heartbeat_interval_ms");
  }
  if (options.redis == nullptr) {
    return absl::InvalidArgumentError(
        "InstanceRegistry needs connections (InstanceRegistryOptions::redis)");
  }
  std::shared_ptr<RedisConnections> connections = std::move(options.redis);
  options.redis = nullptr;  // the registry holds them once
  std::shared_ptr<Timers> timers = options.timers != nullptr ? options.timers : ThreadTimers();
  options.timers = nullptr;
  if (options.instance_id.empty()) options.instance_id = DefaultInstanceId();
  auto registry = std::make_unique<RedisInstanceRegistry>(
      std::move(options), std::move(connections), std::move(timers));
  registry->Start();
  return std::unique_ptr<InstanceRegistry>(std::move(registry));
}

}  // namespace tollgate
