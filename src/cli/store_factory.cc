// Copyright tollgate authors. Which store `tollgate serve` uses.
#include <openssl/sha.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"
#include "src/cli/serve.h"
#include "src/server/resilience_log.h"
#include "tollgate/fallback_shares.h"
#include "tollgate/memory_store.h"
#include "tollgate/redis_connections.h"
#include "tollgate/redis_store.h"
#include "tollgate/resilience.h"
#include "tollgate/sync_store.h"
#include "tollgate/timers.h"

namespace tollgate::cli {
namespace {

// How often the registry probes Redis (InstanceRegistryOptions' default), and the ceiling of
// the shared connections' reconnect backoff.
constexpr int64_t kProbeIntervalMs = 250;

// The instances that share a fail_open limit's outage budget are those enforcing the same
// limits: N is learned per group, the group named by the limits this config defines (its
// limit names and Envoy domains, sorted), so an Envoy-only server does not count in the N
// of a `limits:` fleet on the same Redis. The same files give the same group on every
// instance and build (SHA-256, not a process-local hash).
std::string InstanceGroup(const LoadedConfigs& config) {
  std::vector<std::string> names;
  for (const Limit& limit : config.limits) names.push_back(absl::StrCat("limit:", limit.name));
  for (const EnvoyDomainConfig& domain : config.envoy_domains) {
    names.push_back(absl::StrCat("domain:", domain.domain));
  }
  std::sort(names.begin(), names.end());
  const std::string joined = absl::StrJoin(names, "\n");
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(joined.data()), joined.size(), digest);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), 8));  // 64 bits name a group
}

}  // namespace

absl::StatusOr<ServeStore> MakeStore(const ServeOptions& options, const LoadedConfigs& config,
                                     std::vector<boost::asio::io_context*> loops) {
  ServeStore result;
  const int64_t max_keys =
      options.memory_max_keys > 0 ? options.memory_max_keys : kDefaultMemoryMaxKeys;
  if (options.redis_url.empty()) {
    absl::StatusOr<std::unique_ptr<MemoryStore>> store =
        MemoryStore::Create({.max_keys = max_keys});
    if (!store.ok()) return store.status();
    result.memory = store->get();
    result.store = std::shared_ptr<Store>(*std::move(store));
    return result;
  }
  // One set of connections for the exact store, the sync store and the registry, on the
  // service's loops; the periodic work (sync rounds, heartbeats) and every check's deadline
  // run on the same loops' timers. Reconnecting every 250 ms at most keeps readiness, which
  // follows the registry's probe, within about a probe interval of Redis' return.
  RedisConnectionsOptions connections;
  connections.url = options.redis_url;
  connections.reconnect_max_ms = kProbeIntervalMs;
  connections.caller_loops = loops;
  absl::StatusOr<std::shared_ptr<RedisConnections>> redis = RedisConnections::Connect(connections);
  if (!redis.ok()) return redis.status();
  result.redis = *redis;
  std::shared_ptr<Timers> timers = LoopTimers(std::move(loops));
  RedisStoreOptions exact_options;
  exact_options.redis = result.redis;
  exact_options.key_prefix = options.redis_key_prefix;
  absl::StatusOr<std::unique_ptr<RedisStore>> exact = RedisStore::Create(exact_options);
  if (!exact.ok()) return exact.status();
  for (const std::string& warning : (*exact)->warnings()) spdlog::warn("redis: {}", warning);

  // One line per state change of Redis, the breaker, the fallback and N (rate-limited).
  auto log = std::make_shared<server::ResilienceLog>();
  ResilienceEventCallback on_event = [log](const ResilienceEvent& event) { log->Log(event); };
  ResilienceOptions resilience;
  resilience.timers = timers;
  resilience.on_event = on_event;
  resilience.fallback_max_keys = max_keys;
  // The registry is also the instance's own probe of Redis, which /readyz follows; with a
  // fixed N it only probes and does not join the set.
  // fail_open's demand-weighted shares: counted by the resilient store, learned by the
  // registry's heartbeat (a fixed N does not heartbeat: equal shares).
  if (options.instances <= 0) {
    result.fallback_shares = std::make_shared<FallbackShares>();
    resilience.fallback_shares = result.fallback_shares;
  }
  InstanceRegistryOptions registry_options;
  registry_options.redis = result.redis;
  registry_options.fallback_shares = result.fallback_shares;
  registry_options.timers = timers;
  registry_options.key =
      absl::StrCat(options.redis_key_prefix, "instances:", InstanceGroup(config));
  registry_options.probe_interval_ms = kProbeIntervalMs;
  registry_options.announce = options.instances <= 0;
  registry_options.on_event = on_event;
  absl::StatusOr<std::unique_ptr<InstanceRegistry>> registry =
      InstanceRegistry::Start(registry_options);
  if (!registry.ok()) return registry.status();
  result.registry = std::move(*registry);
  if (options.instances > 0) {
    const int64_t instances = options.instances;
    resilience.instance_count = [instances] { return instances; };
  } else {
    std::shared_ptr<const InstanceRegistry> registry_ref = result.registry;
    resilience.instance_count = [registry_ref] { return registry_ref->Count(); };
    spdlog::info("instance {}: {} live instance(s)", registry_ref->instance_id(),
                 registry_ref->Count());
  }
  // Sync mode never waits on Redis on the request path and handles Redis failures itself,
  // so it is not wrapped in the ResilientStore.
  SyncStoreOptions sync_options;
  sync_options.redis = result.redis;
  sync_options.key_prefix = options.redis_key_prefix;
  sync_options.timers = timers;
  sync_options.instance_count = resilience.instance_count;
  absl::StatusOr<std::unique_ptr<SyncStore>> sync = SyncStore::Create(std::move(sync_options));
  if (!sync.ok()) return sync.status();
  result.sync_store = std::shared_ptr<Store>(*std::move(sync));

  absl::StatusOr<std::unique_ptr<ResilientStore>> store =
      ResilientStore::Create(std::shared_ptr<Store>(*std::move(exact)), std::move(resilience));
  if (!store.ok()) return store.status();
  result.resilient = store->get();
  result.store = std::shared_ptr<Store>(*std::move(store));
  return result;
}

}  // namespace tollgate::cli
