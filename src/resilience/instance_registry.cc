// Copyright tollgate authors.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "src/core/timer_task.h"
#include "src/resilience/fallback_shares_impl.h"
#include "src/store/redis/lua_scripts.h"
#include "src/store/redis/redis_connections_impl.h"
#include "src/store/redis/resp.h"
#include "src/store/redis/router.h"
#include "src/store/redis/slot.h"
#include "tollgate/resilience.h"

namespace tollgate {
namespace {

using redis::RedisReply;

std::string DefaultInstanceId() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::random_device random;
  return absl::StrCat(host, ":", getpid(), ":", random() % 1000000);
}

class RedisInstanceRegistry final : public InstanceRegistry {
 public:
  RedisInstanceRegistry(InstanceRegistryOptions options,
                        std::shared_ptr<RedisConnections> connections,
                        std::shared_ptr<Timers> timers)
      : options_(std::move(options)),
        timers_(std::move(timers)),
        slot_(redis::KeySlot(options_.key)),
        connections_(std::move(connections)) {
    if (options_.instance_id.empty()) options_.instance_id = DefaultInstanceId();
    // The demand of periods p % 3 == 0, 1, 2, in the slot of the set (one script call).
    for (int i = 0; i < 3; ++i) {
      demand_keys_.push_back(
          absl::StrCat(options_.key, ":demand:", i, "{", redis::SlotTag(slot_), "}"));
    }
  }

  ~RedisInstanceRegistry() override {
    // A probe in progress uses the registry until it is settled (answered or timed out).
    if (task_ != nullptr) task_->StopAndWait();
    // Leave the set at once, so the others' share grows without waiting for the TTL.
    if (options_.announce) {
      (void)redis::RouterOf(*connections_)
          .Command({"ZREM", options_.key, options_.instance_id}, slot_);
    }
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
    redis::RouterOf(*connections_).Post(std::move(first));
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
    absl::AnyInvocable<void(absl::StatusOr<RedisReply>) &&> answer;
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
    std::vector<std::string> command = {"PING"};
    if (heartbeat_due) command = HeartbeatCommand(shares, reported);
    call->answer = [this, heartbeat_due, now, shares, reported = std::move(reported),
                    done = std::move(done)](const absl::StatusOr<RedisReply>& reply) mutable {
      absl::StatusOr<Heartbeat> heartbeat =
          heartbeat_due ? ParseHeartbeat(reply, shares != nullptr) : PingAnswer(reply);
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
    redis::RouterOf(*connections_)
        .Send(slot_, redis::FormatCommand(command), [call](absl::StatusOr<RedisReply> reply) {
          if (call->answered.exchange(true)) return;
          std::move(call->answer)(std::move(reply));
        });
  }

  // heartbeat.lua with this instance's id, and with `shares`: the demand keys, the period,
  // the period last learned and the units of `reported`.
  std::vector<std::string> HeartbeatCommand(
      const resilience::FallbackSharesImpl* shares,
      const resilience::FallbackSharesImpl::Counts& reported) const {
    std::vector<std::string> command = {"EVAL", std::string(redis::kLuaHeartbeat),
                                        shares != nullptr ? "4" : "1", options_.key};
    if (shares != nullptr) command.insert(command.end(), demand_keys_.begin(), demand_keys_.end());
    command.push_back(options_.instance_id);
    command.push_back(absl::StrCat(options_.instance_ttl_ms * 1000));
    if (shares == nullptr) return command;
    command.push_back(absl::StrCat(options_.demand_period_ms * 1000));
    command.push_back(absl::StrCat(shares->period()));
    for (const auto& [limit, units] : reported) {
      command.push_back(limit);
      command.push_back(absl::StrCat(units));
    }
    return command;
  }

  // What a heartbeat answered: the live count, and with demand the period it ran in, the
  // incarnation of that period's totals and, in a new period, the totals of the two before.
  struct Heartbeat {
    int64_t count = 0;
    int64_t period = -1;
    std::string created;
    bool has_previous = false;
    std::vector<resilience::FallbackSharesImpl::PeriodTotals> previous;
  };

  static absl::StatusOr<Heartbeat> ParseHeartbeat(const absl::StatusOr<RedisReply>& reply,
                                                  bool demand) {
    if (!reply.ok()) return reply.status();
    const auto unexpected = [&] {
      return absl::UnavailableError(
          absl::StrCat("heartbeat: unexpected reply ", redis::DebugString(*reply)));
    };
    const RedisReply* count = &*reply;
    if (demand) {
      if (reply->type != RedisReply::Type::kArray || reply->elements.size() < 3 ||
          reply->elements[1].type != RedisReply::Type::kInteger ||
          reply->elements[2].type != RedisReply::Type::kString) {
        return unexpected();
      }
      count = &reply->elements[0];
    }
    if (count->type != RedisReply::Type::kInteger || count->integer < 1) return unexpected();
    Heartbeat heartbeat;
    heartbeat.count = count->integer;
    if (!demand) return heartbeat;
    heartbeat.period = reply->elements[1].integer;
    heartbeat.created = reply->elements[2].str;
    heartbeat.has_previous = reply->elements.size() >= 5;
    for (size_t i = 3; heartbeat.has_previous && i < 5; ++i) {
      const RedisReply& table = reply->elements[i];
      if (table.type != RedisReply::Type::kArray || table.elements.size() % 2 != 0) {
        return unexpected();
      }
      resilience::FallbackSharesImpl::PeriodTotals& totals = heartbeat.previous.emplace_back();
      for (size_t field = 0; field + 1 < table.elements.size(); field += 2) {
        const std::string& name = table.elements[field].str;
        const std::string& value = table.elements[field + 1].str;
        int64_t units = 0;
        if (name == "created") {
          totals.created = value;
        } else if (absl::StartsWith(name, "l:") && absl::SimpleAtoi(value, &units)) {
          totals.units.emplace_back(name.substr(2), units);
        }
      }
    }
    return heartbeat;
  }

  static absl::StatusOr<Heartbeat> PingAnswer(const absl::StatusOr<RedisReply>& reply) {
    if (!reply.ok()) return reply.status();
    if (reply->type == RedisReply::Type::kError) {
      return absl::UnavailableError(absl::StrCat("PING: ", reply->str));
    }
    return Heartbeat{};
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

  InstanceRegistryOptions options_;
  const std::shared_ptr<Timers> timers_;
  const int slot_;                        // the hash slot of options_.key
  std::vector<std::string> demand_keys_;  // heartbeat.lua's KEYS[2..4]
  const std::shared_ptr<RedisConnections> connections_;
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
  auto registry = std::make_unique<RedisInstanceRegistry>(
      std::move(options), std::move(connections), std::move(timers));
  registry->Start();
  return std::unique_ptr<InstanceRegistry>(std::move(registry));
}

}  // namespace tollgate
