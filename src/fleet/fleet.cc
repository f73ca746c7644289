// Copyright tollgate authors.
#include "tollgate/fleet.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tollgate/redis_store.h"

namespace tollgate {
namespace {

// The members are declared in the order they are built, so that they are destroyed in the
// reverse one (each part goes before what it uses), as the destructor spells out.
class FleetImpl final : public Fleet {
 public:
  ~FleetImpl() override {
    // Whoever checks goes first; then the sync store, whose last round sends this instance's
    // deltas (and waits for them); then the exact store behind its resilience layer, once the
    // calls it sent are answered; the registry, which leaves the set of live instances and
    // which the stores' instance counts read; and the connections last.
    limiter_.reset();
    sync_store_.reset();
    store_.reset();
    registry_.reset();
    fallback_shares_.reset();
    connections_.reset();
  }

  explicit FleetImpl(int64_t fixed_instances) : fixed_instances_(fixed_instances) {}

  Limiter& limiter() const override { return *limiter_; }

  absl::StatusOr<std::unique_ptr<Limiter>> NewLimiter(std::vector<Limit> limits) const override {
    if (redis_ != nullptr) {
      if (absl::Status durable = redis_->CheckDurable(limits); !durable.ok()) return durable;
    }
    return Limiter::Create(
        {.limits = std::move(limits), .store = store_, .sync_store = sync_store_, .clock = clock_});
  }

  bool shared() const override { return connections_ != nullptr; }
  const std::vector<std::string>& warnings() const override { return warnings_; }
  const MemoryStore* memory_store() const override { return memory_; }
  const ResilientStore* resilient_store() const override { return resilient_; }
  const SyncStore* sync_store() const override { return sync_; }
  const RedisStore* redis_store() const override { return redis_; }
  const FallbackShares* fallback_shares() const override { return fallback_shares_.get(); }
  const std::shared_ptr<RedisConnections>& connections() const override { return connections_; }

  int64_t InstanceCount() const override {
    if (fixed_instances_ > 0) return fixed_instances_;
    return registry_ != nullptr ? registry_->Count() : 1;
  }
  bool StoreReachable() const override {
    return registry_ == nullptr || registry_->StoreReachable();
  }
  const std::string& instance_id() const override {
    static const std::string kNone;
    return registry_ != nullptr ? registry_->instance_id() : kNone;
  }

  // Without Redis: the limits in this process's memory.
  absl::Status StartInMemory(const FleetOptions& options) {
    absl::StatusOr<std::unique_ptr<MemoryStore>> store =
        MemoryStore::Create({.clock = options.clock, .max_keys = options.memory_max_keys});
    if (!store.ok()) return store.status();
    memory_ = store->get();
    store_ = std::shared_ptr<Store>(*std::move(store));
    return absl::OkStatus();
  }

  // With Redis: see tollgate/fleet.h for the parts and their order.
  absl::Status StartShared(FleetOptions& options) {
    std::shared_ptr<Timers> timers = options.timers;
    if (timers == nullptr) {
      timers = options.redis.caller_loops.empty() ? ThreadTimers()
                                                  : LoopTimers(options.redis.caller_loops);
    }
    absl::StatusOr<std::shared_ptr<RedisConnections>> connections =
        RedisConnections::Connect(options.redis);
    if (!connections.ok()) return connections.status();
    connections_ = *std::move(connections);

    absl::StatusOr<std::unique_ptr<RedisStore>> exact =
        RedisStore::Create({.redis = connections_,
                            .key_prefix = options.key_prefix,
                            .clock = options.clock,
                            .on_event = options.on_event});
    if (!exact.ok()) return exact.status();
    warnings_ = (*exact)->warnings();
    redis_ = exact->get();

    // The registry is also the instance's own probe of Redis (StoreReachable); with a fixed
    // N it only probes. fail_open's demand-weighted shares are counted by the resilient
    // store and learned by the registry's heartbeat.
    if (fixed_instances_ == 0) fallback_shares_ = FallbackShares::Create({.clock = options.clock});
    InstanceRegistryOptions registry;
    registry.redis = connections_;
    registry.timers = timers;
    registry.key = absl::StrCat(options.key_prefix, "instances",
                                options.instance_group.empty() ? "" : ":", options.instance_group);
    registry.instance_id = options.instance_id;
    registry.heartbeat_interval_ms = options.heartbeat_interval_ms;
    registry.announce = fixed_instances_ == 0;
    registry.on_event = options.on_event;
    registry.fallback_shares = fallback_shares_;
    registry.demand_period_ms = options.demand_period_ms;
    absl::StatusOr<std::unique_ptr<InstanceRegistry>> started =
        InstanceRegistry::Start(std::move(registry));
    if (!started.ok()) return started.status();
    registry_ = *std::move(started);
    std::function<int64_t()> instance_count;
    if (fixed_instances_ > 0) {
      instance_count = [n = fixed_instances_] { return n; };
    } else {
      instance_count = [registry = registry_] { return registry->Count(); };
    }

    // Sync mode never waits on Redis on the request path and handles Redis failures itself,
    // so it is not behind the resilience layer.
    absl::StatusOr<std::unique_ptr<SyncStore>> sync =
        SyncStore::Create({.redis = connections_,
                           .key_prefix = options.key_prefix,
                           .clock = options.clock,
                           .timers = timers,
                           .instance_count = instance_count});
    if (!sync.ok()) return sync.status();
    sync_ = sync->get();
    sync_store_ = std::shared_ptr<Store>(*std::move(sync));

    ResilienceOptions resilience;
    resilience.clock = options.clock;
    resilience.timers = timers;
    resilience.instance_count = std::move(instance_count);
    resilience.fallback_shares = fallback_shares_;
    resilience.fallback_max_keys = options.memory_max_keys;
    resilience.on_event = options.on_event;
    absl::StatusOr<std::unique_ptr<ResilientStore>> resilient =
        ResilientStore::Create(std::shared_ptr<Store>(*std::move(exact)), std::move(resilience));
    if (!resilient.ok()) return resilient.status();
    resilient_ = resilient->get();
    store_ = std::shared_ptr<Store>(*std::move(resilient));
    return absl::OkStatus();
  }

  absl::Status MakeLimiter(std::vector<Limit> limits, Clock* clock) {
    clock_ = clock;
    absl::StatusOr<std::unique_ptr<Limiter>> limiter = NewLimiter(std::move(limits));
    if (!limiter.ok()) return limiter.status();
    limiter_ = *std::move(limiter);
    return absl::OkStatus();
  }

 private:
  Clock* clock_ = nullptr;
  const int64_t fixed_instances_;  // 0: N is learned (with Redis) or 1
  std::vector<std::string> warnings_;
  std::shared_ptr<RedisConnections> connections_;
  std::shared_ptr<FallbackShares> fallback_shares_;
  // Shared: the stores' instance counts hold it, however long the stores live.
  std::shared_ptr<InstanceRegistry> registry_;
  std::shared_ptr<Store> store_;               // the memory store, or the resilient one over Redis
  std::shared_ptr<Store> sync_store_;          // with Redis
  const MemoryStore* memory_ = nullptr;        // points into store_ without Redis
  const ResilientStore* resilient_ = nullptr;  // points into store_ with Redis
  const SyncStore* sync_ = nullptr;            // points into sync_store_
  const RedisStore* redis_ = nullptr;          // behind store_, with Redis
  std::unique_ptr<Limiter> limiter_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Fleet>> Fleet::Connect(FleetOptions options) {
  // The limits are refused before anything connects.
  for (const Limit& limit : options.limits) {
    if (absl::Status status = ValidateLimit(limit); !status.ok()) return status;
  }
  auto fleet = std::make_unique<FleetImpl>(std::max<int64_t>(0, options.instances));
  absl::Status started =
      options.redis.url.empty() ? fleet->StartInMemory(options) : fleet->StartShared(options);
  if (!started.ok()) return started;
  if (absl::Status made = fleet->MakeLimiter(std::move(options.limits), options.clock);
      !made.ok()) {
    return made;
  }
  return std::unique_ptr<Fleet>(std::move(fleet));
}

}  // namespace tollgate
