// Copyright tollgate authors.
#include "src/cli/serve.h"

#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "spdlog/spdlog.h"
#include "src/cli/load_configs.h"
#include "src/cli/serve_environment.h"
#include "src/config/descriptor_matcher.h"
#include "src/core/build_info.h"
#include "src/server/check_service.h"
#include "src/server/event_loops.h"
#include "src/server/grpc_server.h"
#include "src/server/http_server.h"
#include "src/server/listen_address.h"
#include "src/server/metrics.h"
#include "src/server/rls_grpc.h"
#include "src/server/rls_service.h"
#include "src/server/tracing.h"
#include "tollgate/limiter.h"
#include "tollgate/memory_store.h"
#include "tollgate/resilience.h"

namespace tollgate::cli {
namespace {

// How long a shutdown waits for requests in flight before it drops them.
constexpr std::chrono::seconds kDrainTimeout(10);
// How often the config files are looked at for a change.
constexpr absl::Duration kConfigPollInterval = absl::Seconds(1);

// What identifies a version of a file: a rewrite changes the mtime or the size, a
// replace-by-rename the inode. All zero when the file cannot be read.
struct FileVersion {
  int64_t mtime_nanos = 0;
  int64_t size = 0;
  uint64_t inode = 0;
  bool operator==(const FileVersion&) const = default;
};

std::vector<FileVersion> FileVersions(const std::vector<std::string>& paths) {
  std::vector<FileVersion> versions;
  for (const std::string& path : paths) {
    struct stat info {};
    FileVersion version;
    if (stat(path.c_str(), &info) == 0) {
      version.mtime_nanos =
          static_cast<int64_t>(info.st_mtim.tv_sec) * 1'000'000'000 + info.st_mtim.tv_nsec;
      version.size = info.st_size;
      version.inode = info.st_ino;
    }
    versions.push_back(version);
  }
  return versions;
}

// Reloads every --config file into the running servers. Thread-safe (SIGHUP and the file
// poller may both ask).
class Reloader {
 public:
  // `memory_store_max_keys`: the config's memory_store.max_keys at start; `given_memory_max_keys`:
  // whether --memory-max-keys overrode it.
  Reloader(const ServeOptions& options, server::Metrics& metrics, server::CheckService& service,
           std::vector<FileVersion> versions, int64_t memory_store_max_keys,
           bool given_memory_max_keys)
      : options_(options),
        metrics_(metrics),
        service_(service),
        given_memory_max_keys_(given_memory_max_keys),
        versions_(std::move(versions)),
        memory_store_max_keys_(memory_store_max_keys) {}

  // Loads and validates all files; a valid whole replaces the running config (HTTP and
  // Envoy's alike, in one swap), an invalid one is logged and the old config keeps serving.
  void Reload(std::string_view why) {
    absl::MutexLock lock(&mu_);
    versions_ = FileVersions(options_.config_paths);
    absl::StatusOr<LoadedConfigs> config = LoadConfigs(options_.config_paths);
    const size_t limits = config.ok() ? config->limits.size() : 0;
    const size_t domains = config.ok() ? config->envoy_domains.size() : 0;
    const int64_t memory_store_max_keys = config.ok() ? config->memory_store_max_keys : 0;
    absl::Status status = config.ok() ? service_.Reload(*std::move(config)) : config.status();
    if (!status.ok()) {
      metrics_.RecordReload(false);
      // One record per error (LoadConfigs reports each on a line of its own).
      for (absl::string_view line : absl::StrSplit(status.message(), '\n')) {
        spdlog::error("config reload ({}) refused, the old config keeps serving: {}", why,
                      std::string(line));
      }
      return;
    }
    metrics_.RecordReload(true);
    spdlog::info("config reloaded ({}): {} limits and {} Envoy domains", why, limits, domains);
    if (memory_store_max_keys != memory_store_max_keys_) {
      spdlog::warn(
          "memory_store.max_keys changed in the config; the store keeps its cap of {} keys "
          "until a restart{}",
          options_.memory_max_keys,
          given_memory_max_keys_ ? " (and --memory-max-keys overrides the config's)" : "");
      memory_store_max_keys_ = memory_store_max_keys;
    }
  }

  // Reloads when a file's version differs from the last one loaded.
  void ReloadIfChanged() {
    std::vector<FileVersion> now = FileVersions(options_.config_paths);
    {
      absl::MutexLock lock(&mu_);
      if (now == versions_) return;
    }
    Reload("a config file changed");
  }

 private:
  const ServeOptions& options_;
  server::Metrics& metrics_;
  server::CheckService& service_;
  absl::Mutex mu_;  // one reload at a time
  const bool given_memory_max_keys_;
  std::vector<FileVersion> versions_ ABSL_GUARDED_BY(mu_);
  // The config's memory_store.max_keys last loaded (the store's cap is set at start only).
  int64_t memory_store_max_keys_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

int RunServe(const ServeOptions& given) {
  // The options as served: the Redis URL with its secrets read, the memory cap decided.
  ServeOptions options = given;
  // Block the stop signals before any thread starts, so every thread inherits the mask and
  // only the sigwait below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);  // reload
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  absl::StatusOr<server::ListenAddress> http_address =
      server::ParseListenAddress(options.http_address);
  if (!http_address.ok()) {
    spdlog::error("--http: {}", std::string(http_address.status().message()));
    return 2;
  }
  absl::StatusOr<server::ListenAddress> grpc_address =
      server::ParseListenAddress(options.grpc_address);
  if (!grpc_address.ok()) {
    spdlog::error("--grpc: {}", std::string(grpc_address.status().message()));
    return 2;
  }

  absl::StatusOr<std::string> redis_url = ResolveRedisUrl(options);
  if (!redis_url.ok()) {
    spdlog::error("{}", std::string(redis_url.status().message()));
    return 2;
  }
  options.redis_url = *std::move(redis_url);

  // Taken before reading, so that a write during the load is seen as a change.
  std::vector<FileVersion> config_versions = FileVersions(options.config_paths);
  absl::StatusOr<LoadedConfigs> config = LoadConfigs(options.config_paths);
  if (!config.ok()) {
    for (absl::string_view line : absl::StrSplit(config.status().message(), '\n')) {
      spdlog::error("invalid config: {}", std::string(line));
    }
    return 1;
  }
  // --memory-max-keys wins over the config's memory_store.max_keys.
  if (options.memory_max_keys == 0) {
    options.memory_max_keys =
        config->memory_store_max_keys > 0 ? config->memory_store_max_keys : kDefaultMemoryMaxKeys;
  }
  // Every connection of the service runs on these loops: HTTP and gRPC sessions, and the
  // Redis connections their checks use. Declared before the store, so destroyed after it.
  absl::StatusOr<std::unique_ptr<server::EventLoops>> loops =
      server::EventLoops::Start(options.threads);
  if (!loops.ok()) {
    spdlog::error("--threads: {}", std::string(loops.status().message()));
    return 2;
  }
  std::vector<boost::asio::io_context*> loop_contexts;
  for (int i = 0; i < (*loops)->size(); ++i) loop_contexts.push_back(&(*loops)->loop(i));
  absl::StatusOr<ServeStore> store = MakeStore(options, *config, std::move(loop_contexts));
  if (!store.ok()) {
    spdlog::error("{}", std::string(store.status().message()));
    return store.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  const size_t limit_count = config->limits.size();
  const int64_t config_memory_store_max_keys = config->memory_store_max_keys;
  const size_t domain_count = config->envoy_domains.size();

  // Outlives both servers (declared before them).
  server::Metrics metrics;
  metrics.set_resilient_store(store->resilient);
  if (store->memory != nullptr) metrics.set_memory_store(store->memory, options.memory_max_keys);
  if (options.instances > 0) {
    metrics.set_instance_count([instances = options.instances] { return instances; });
  } else if (store->registry != nullptr) {
    const InstanceRegistry* registry = store->registry.get();
    metrics.set_instance_count([registry] { return registry->Count(); });
  }
  if (store->fallback_shares != nullptr) {
    metrics.set_fallback_shares(
        [shares = store->fallback_shares, registry = store->registry.get()] {
          return shares->Fractions(registry->Count());
        });
  }
  // Tracing: spans of ShouldRateLimit, exported off the request path. Declared before the
  // RLS service that records into it, so destroyed after it.
  std::unique_ptr<server::Tracer> tracer;
  if (options.tracing.enabled) {
    absl::StatusOr<std::unique_ptr<server::Tracer>> started =
        server::Tracer::Start(options.tracing);
    if (!started.ok()) {
      spdlog::error("{}", std::string(started.status().message()));
      return 2;
    }
    tracer = *std::move(started);
    metrics.set_tracing_stats([raw = tracer.get()] { return raw->stats(); });
  }
  // One check service for HTTP and Envoy's API: one snapshot, one Limiter over both stores.
  absl::StatusOr<std::unique_ptr<server::CheckService>> made_service =
      server::CheckService::Create({.store = store->store,
                                    .sync_store = store->sync_store,
                                    .clock = nullptr,
                                    .metrics = &metrics,
                                    .max_override_limits = 1000},
                                   *std::move(config));
  if (!made_service.ok()) {
    spdlog::error("invalid config: {}", std::string(made_service.status().message()));
    return 1;
  }
  std::shared_ptr<server::CheckService> check_service = *std::move(made_service);

  // Envoy's rate-limit service, on the same store (the same counters as HTTP).
  server::RlsServiceOptions rls_options;
  rls_options.metrics = &metrics;
  rls_options.check_service = check_service.get();
  rls_options.shadow_mode = options.shadow_mode;
  rls_options.quota_mode = options.quota_mode;
  rls_options.response_dynamic_metadata = options.response_dynamic_metadata;
  rls_options.max_descriptors = options.max_descriptors;
  rls_options.tracer = tracer.get();
  absl::StatusOr<std::unique_ptr<server::RlsService>> rls =
      server::RlsService::Create(std::move(rls_options));
  if (!rls.ok()) {
    spdlog::error("invalid config: {}", std::string(rls.status().message()));
    return 1;
  }
  server::GrpcHealth grpc_health;
  server::GrpcMethods grpc_methods;
  server::AddRlsGrpcMethods(grpc_methods, **rls, grpc_health);
  server::GrpcServerOptions grpc_options = options.grpc;
  grpc_options.address = *grpc_address;
  grpc_options.max_message_bytes = static_cast<uint32_t>(options.max_body_bytes);
  absl::StatusOr<std::unique_ptr<server::GrpcServer>> grpc =
      server::GrpcServer::Start(**loops, grpc_options, std::move(grpc_methods));
  if (!grpc.ok()) {
    spdlog::error("gRPC: {}", std::string(grpc.status().message()));
    return 1;
  }

  server::HttpServerOptions http_options;
  http_options.host = http_address->host;
  http_options.port = http_address->port;
  http_options.loops = loops->get();
  http_options.max_checks_per_request = static_cast<size_t>(options.max_descriptors);
  http_options.limits.max_body_bytes = static_cast<size_t>(options.max_body_bytes);
  http_options.limits.max_header_bytes = static_cast<uint32_t>(options.max_header_bytes);
  http_options.limits.idle_timeout = std::chrono::milliseconds(options.http_timeout_ms);
  http_options.rls_service = rls->get();
  http_options.ratelimit_headers = options.ratelimit_headers;
  http_options.metrics = &metrics;
  // Ready when the instance's own probe of Redis (the registry's, every 250 ms, whatever
  // the traffic) is answered, or when no limit needs Redis to answer correctly.
  const InstanceRegistry* probe = store->registry.get();
  http_options.readiness = [probe, check_service]() -> absl::Status {
    if (probe == nullptr || probe->StoreReachable()) return absl::OkStatus();  // or in memory
    const std::string limit = check_service->snapshot()->fail_closed_limit;
    if (limit.empty()) return absl::OkStatus();
    return absl::UnavailableError(absl::StrCat(
        "redis is unreachable (this instance's probe fails) and limit '", limit, "' fails closed"));
  };
  absl::StatusOr<std::unique_ptr<server::HttpServer>> http =
      server::HttpServer::Start(std::move(http_options), check_service);
  if (!http.ok()) {
    spdlog::error("{}", std::string(http.status().message()));
    return 1;
  }
  spdlog::info("tollgate {} (commit {})", kBuildVersion, kBuildCommit);
  spdlog::info("{} limits and {} Envoy domains from {}, store {}", limit_count, domain_count,
               absl::StrJoin(options.config_paths, ", "), store->store->Name());
  if (options.redis_url.empty()) {
    spdlog::info("memory store: at most {} keys", options.memory_max_keys);
  }
  if (tracer != nullptr) {
    spdlog::info("tracing: exporting to {}, sampling {}", tracer->url(), tracer->sampling_rate());
  }
  // Tests and scripts read these lines to learn the ports (with HOST:0).
  spdlog::info("listening grpc={}", (*grpc)->address());
  spdlog::info("listening http={}", (*http)->address());

  Reloader reloader(options, metrics, *check_service, std::move(config_versions),
                    config_memory_store_max_keys, given.memory_max_keys > 0);
  absl::Notification stop_polling;
  std::thread poller([&] {
    while (!stop_polling.WaitForNotificationWithTimeout(kConfigPollInterval)) {
      reloader.ReloadIfChanged();
    }
  });

  int signal_number = 0;
  while (true) {
    if (sigwait(&stop_signals, &signal_number) != 0) continue;
    if (signal_number != SIGHUP) break;
    reloader.Reload("SIGHUP");
  }
  stop_polling.Notify();
  poller.join();
  spdlog::info("received {}, finishing requests in flight",
               signal_number == SIGTERM ? "SIGTERM" : "SIGINT");
  // Health checks see NOT_SERVING on connections still open, while both servers drain.
  grpc_health.SetServing(false);
  (*http)->Shutdown();
  bool drained = (*http)->Wait(kDrainTimeout);
  drained = (*grpc)->Shutdown(kDrainTimeout) && drained;
  if (!drained)
    spdlog::warn("requests still in flight after {}s were dropped", kDrainTimeout.count());
  // Both servers go before the RLS service they call. The loops (declared first) stop last,
  // after the store has shut its connections on them down.
  http->reset();
  grpc->reset();
  // Connections still closing on the loops hold the check service, and so the stores, for a
  // moment: the stores are destroyed here, while the loops still run, once they let go.
  const auto let_go = std::chrono::steady_clock::now() + kDrainTimeout;
  while (check_service.use_count() > 1 && std::chrono::steady_clock::now() < let_go) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (tracer != nullptr) tracer->Shutdown();  // exports what is queued, within its bound
  spdlog::info("stopped");
  return 0;
}

}  // namespace tollgate::cli
