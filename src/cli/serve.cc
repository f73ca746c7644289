// Copyright tollgate authors.
#include "src/cli/serve.h"

#include <signal.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "spdlog/spdlog.h"
#include "src/cli/config_reloader.h"
#include "src/cli/instance_group.h"
#include "src/cli/load_configs.h"
#include "src/cli/serve_environment.h"
#include "src/cli/serve_rlqs.h"
#include "src/cli/serve_xds.h"
#include "src/core/build_info.h"
#include "src/server/check_service.h"
#include "src/server/descriptor_matcher.h"
#include "src/server/event_loops.h"
#include "src/server/grpc_server.h"
#include "src/server/http_server.h"
#include "src/server/listen_address.h"
#include "src/server/metrics.h"
#include "src/server/resilience_log.h"
#include "src/server/rls_grpc.h"
#include "src/server/rls_service.h"
#include "src/server/tracing.h"
#include "tollgate/fleet.h"
#include "tollgate/limiter.h"
#include "tollgate/timers.h"

namespace tollgate::cli {
namespace {

// How long a shutdown waits for requests in flight before it drops them.
constexpr std::chrono::seconds kDrainTimeout(10);
// How often the config files are looked at for a change.
constexpr absl::Duration kConfigPollInterval = absl::Seconds(1);
// How often the fleet's registry probes Redis (InstanceRegistryOptions' default): the ceiling
// of the connections' reconnect backoff, so that readiness, which follows the probe, comes
// back within about a probe interval of Redis' return.
constexpr int64_t kProbeIntervalMs = 250;

// `status` with the positions of the `durable: true` fields of the limits it names (a durable
// limit the deployment cannot honour, RedisStore::CheckDurable) in front of its message.
absl::Status WithDurablePositions(const absl::Status& status,
                                  const std::map<std::string, std::string>& durable_positions) {
  if (status.code() != absl::StatusCode::kFailedPrecondition) return status;
  std::vector<std::string> fields;
  for (const auto& [name, position] : durable_positions) {
    if (absl::StrContains(status.message(), absl::StrCat("limit '", name, "'"))) {
      fields.push_back(absl::StrCat(position, ": limits.", name, ".durable"));
    }
  }
  if (fields.empty()) return status;
  return absl::FailedPreconditionError(
      absl::StrCat(absl::StrJoin(fields, ", "), ": ", status.message()));
}

// The fleet the service checks against (tollgate/fleet.h): in memory without a Redis URL,
// else Redis on the service's loops, with deadlines, sync rounds and heartbeats on `timers`
// and N counted in the group the config names. Each state change of Redis, the breaker, the
// fallback and N is one (rate-limited) log line.
absl::StatusOr<std::unique_ptr<Fleet>> ConnectFleet(const ServeOptions& options,
                                                    const LoadedConfigs& config,
                                                    std::vector<boost::asio::io_context*> loops,
                                                    std::shared_ptr<Timers> timers) {
  auto log = std::make_shared<server::ResilienceLog>();
  absl::StatusOr<std::unique_ptr<Fleet>> fleet = Fleet::Connect({
      .redis = {.url = options.redis_url,
                .reconnect_max_ms = kProbeIntervalMs,
                .caller_loops = std::move(loops)},
      .key_prefix = options.redis_key_prefix,
      .instance_group = InstanceGroup(config),
      .instances = options.instances,
      .memory_max_keys = options.memory_max_keys,
      .timers = std::move(timers),
      .on_event = [log](const ResilienceEvent& event) { log->Log(event); },
  });
  if (!fleet.ok()) return WithDurablePositions(fleet.status(), config.durable_positions);
  for (const std::string& warning : (*fleet)->warnings()) spdlog::warn("redis: {}", warning);
  if ((*fleet)->shared() && options.instances <= 0) {
    spdlog::info("instance {}: {} live instance(s)", (*fleet)->instance_id(),
                 (*fleet)->InstanceCount());
  }
  return fleet;
}

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

  if (options.config_paths.empty() && options.config_dirs.empty() &&
      options.xds.server_address.empty()) {
    spdlog::error(
        "serve needs a config: --config FILE, --config-dir DIR or --xds-server HOST:PORT");
    return 2;
  }
  if (options.start_without_config && options.xds.server_address.empty()) {
    spdlog::warn("--start-without-config applies to --xds-server only; ignored");
  }

  absl::StatusOr<std::string> redis_url = ResolveRedisUrl(options);
  if (!redis_url.ok()) {
    spdlog::error("{}", std::string(redis_url.status().message()));
    return 2;
  }
  options.redis_url = *std::move(redis_url);
  // TLS on the gRPC port: its files are read before anything starts.
  std::shared_ptr<server::GrpcTls> grpc_tls;
  if (options.grpc_tls.enabled()) {
    absl::StatusOr<std::shared_ptr<server::GrpcTls>> tls =
        server::GrpcTls::Create(options.grpc_tls);
    if (!tls.ok()) {
      spdlog::error("{}", std::string(tls.status().message()));
      return tls.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
    }
    grpc_tls = *std::move(tls);
  }

  // Taken before reading, so that a write during the load is seen as a change.
  absl::StatusOr<std::vector<std::string>> config_files = ConfigFiles(options);
  if (!config_files.ok()) {
    spdlog::error("invalid config: {}", std::string(config_files.status().message()));
    return 1;
  }
  std::vector<FileVersion> config_versions = FileVersions(*config_files);
  absl::StatusOr<LoadedConfigs> config = LoadConfigs(*config_files);
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
  // Redis connections their checks use; and every timer, on `timers`. Declared before the
  // fleet, so destroyed after it.
  absl::StatusOr<std::unique_ptr<server::EventLoops>> loops =
      server::EventLoops::Start(options.threads);
  if (!loops.ok()) {
    spdlog::error("--threads: {}", std::string(loops.status().message()));
    return 2;
  }
  std::vector<boost::asio::io_context*> loop_contexts;
  for (int i = 0; i < (*loops)->size(); ++i) loop_contexts.push_back(&(*loops)->loop(i));
  // Deadlines, sync rounds and heartbeats run on the loops' timers; the servers and metrics
  // only read monotonic time, from a clock that never touches the loops (their sessions may
  // be the last to let go of it, while the loops are destroyed).
  const std::shared_ptr<Timers> timers = LoopTimers(loop_contexts);
  const std::shared_ptr<Timers> monotonic = LoopTimers({});
  absl::StatusOr<std::unique_ptr<Fleet>> fleet =
      ConnectFleet(options, *config, loop_contexts, timers);
  // Redis unreachable at start (a pod starting before its Redis): with
  // --redis-startup-wait-ms, try again with backoff, until then or a stop signal.
  const int64_t wait_started_micros = timers->NowMicros();
  int64_t retry_ms = std::max<int64_t>(options.redis_startup_retry_initial_ms, 1);
  while (!fleet.ok() && fleet.status().code() == absl::StatusCode::kUnavailable &&
         options.redis_startup_wait_ms != 0) {
    const int64_t waited_ms = (timers->NowMicros() - wait_started_micros) / 1000;
    if (options.redis_startup_wait_ms > 0 && waited_ms >= options.redis_startup_wait_ms) break;
    spdlog::warn("redis unreachable at start ({}); trying again in {} ms",
                 std::string(fleet.status().message()), retry_ms);
    const timespec pause{static_cast<time_t>(retry_ms / 1000),
                         static_cast<long>(retry_ms % 1000) * 1'000'000};  // NOLINT(runtime/int)
    const int signal_number = sigtimedwait(&stop_signals, nullptr, &pause);
    if (signal_number == SIGTERM || signal_number == SIGINT) {
      spdlog::info("stopped while waiting for redis");
      return 0;
    }
    retry_ms = std::min(retry_ms * 2, std::max<int64_t>(options.redis_startup_retry_max_ms, 1));
    fleet = ConnectFleet(options, *config, loop_contexts, timers);
  }
  if (!fleet.ok()) {
    spdlog::error("{}", std::string(fleet.status().message()));
    return fleet.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  const Fleet& stack = **fleet;
  const size_t limit_count = config->limits.size();
  const int64_t config_memory_store_max_keys = config->memory_store_max_keys;
  const size_t domain_count = config->envoy_domains.size();
  const std::map<std::string, std::string> durable_positions = config->durable_positions;

  // Outlives both servers (declared before them).
  server::Metrics metrics(monotonic);
  if (options.ratelimit_metrics) metrics.EnableRatelimitFamilies(options.near_limit_ratio);
  metrics.RecordInitialLoad();
  metrics.set_resilient_store(stack.resilient_store());
  if (const RedisStore* redis = stack.redis_store(); redis != nullptr) {
    metrics.set_durable_waits([redis] { return redis->durable_waits(); });
  }
  if (grpc_tls != nullptr) metrics.set_grpc_tls(&grpc_tls->counters());
  if (stack.memory_store() != nullptr) {
    metrics.set_memory_store(stack.memory_store(), options.memory_max_keys);
  }
  if (options.instances > 0 || stack.shared()) {
    metrics.set_instance_count([&stack] { return stack.InstanceCount(); });
  }
  if (stack.fallback_shares() != nullptr) {
    metrics.set_fallback_shares(
        [&stack] { return stack.fallback_shares()->Fractions(stack.InstanceCount()); });
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
  // One check service for HTTP and Envoy's API: one snapshot, one Limiter over the fleet's
  // stores, made again at each reload.
  absl::StatusOr<std::unique_ptr<server::CheckService>> made_service = server::CheckService::Create(
      {.new_limiter =
           [&stack](std::vector<Limit> limits) { return stack.NewLimiter(std::move(limits)); },
       .clock = nullptr,
       .metrics = &metrics,
       .max_override_limits = 1000,
       .default_envoy_algorithm = options.default_algorithm},
      *std::move(config));
  if (!made_service.ok()) {
    spdlog::error(
        "invalid config: {}",
        std::string(WithDurablePositions(made_service.status(), durable_positions).message()));
    return 1;
  }
  // Held by the servers, their connections and readiness; once the last of them lets go,
  // the service is destroyed (on that thread) and `service_released` tells the shutdown below.
  auto service_released = std::make_shared<absl::Notification>();
  std::shared_ptr<server::CheckService> check_service(
      made_service->release(), [service_released](server::CheckService* service) {
        delete service;
        service_released->Notify();
      });

  // Config over xDS (serve_xds.h): the control plane's domains beside the files'. Without
  // --start-without-config the ports open once its first config is applied.
  std::unique_ptr<xds::XdsClient> xds_client;
  if (!options.xds.server_address.empty()) {
    absl::StatusOr<std::unique_ptr<xds::XdsClient>> started =
        StartXdsConfig(options, *check_service, metrics);
    if (!started.ok()) {
      spdlog::error("{}", std::string(started.status().message()));
      return started.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
    }
    xds_client = *std::move(started);
    if (!options.start_without_config) {
      if (const int signal_number = WaitForFirstXdsConfig(*xds_client, stop_signals);
          signal_number != 0) {
        spdlog::info("received {} before any config from xDS; stopped",
                     signal_number == SIGTERM ? "SIGTERM" : "SIGINT");
        return 0;
      }
    }
  }

  // Envoy's rate-limit service, on the same store (the same counters as HTTP).
  server::RlsServiceOptions rls_options;
  rls_options.metrics = &metrics;
  rls_options.check_service = check_service.get();
  rls_options.shadow_mode = options.shadow_mode;
  rls_options.quota_mode = options.quota_mode;
  rls_options.response_dynamic_metadata = options.response_dynamic_metadata;
  rls_options.descriptor_hits_are_requests = options.descriptor_hits_are_requests;
  rls_options.response_headers = options.envoy_response_headers;
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
  // Envoy's Rate Limit Quota Service beside it (serve_rlqs.h): the same rules, the same Redis.
  absl::StatusOr<std::unique_ptr<rlqs::RlqsService>> rlqs_service =
      StartRlqs(options.rlqs, options.redis_key_prefix, stack, *check_service, timers);
  if (!rlqs_service.ok()) {
    spdlog::error("rlqs: {}", std::string(rlqs_service.status().message()));
    return 1;
  }
  (*rlqs_service)->AddMethod(grpc_methods);
  metrics.set_rlqs_stats([raw = rlqs_service->get()] { return raw->stats(); });
  server::GrpcServerOptions grpc_options = options.grpc;
  grpc_options.address = *grpc_address;
  grpc_options.max_message_bytes = static_cast<uint32_t>(options.max_body_bytes);
  grpc_options.tls = grpc_tls;
  grpc_options.timers = monotonic;
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
  http_options.timers = monotonic;
  http_options.max_checks_per_request = static_cast<size_t>(options.max_descriptors);
  http_options.limits.max_body_bytes = static_cast<size_t>(options.max_body_bytes);
  http_options.limits.max_header_bytes = static_cast<uint32_t>(options.max_header_bytes);
  http_options.limits.idle_timeout = std::chrono::milliseconds(options.http_timeout_ms);
  http_options.rls_service = rls->get();
  http_options.ratelimit_headers = options.ratelimit_headers;
  http_options.metrics = &metrics;
  // Ready when the instance's own probe of Redis (the registry's, every 250 ms, whatever
  // the traffic) is answered, or when no limit needs Redis to answer correctly.
  http_options.readiness = [&stack, check_service]() -> absl::Status {
    if (stack.StoreReachable()) return absl::OkStatus();  // always in memory
    const std::string limit = check_service->snapshot()->fail_closed_limit;
    if (limit.empty()) return absl::OkStatus();
    return absl::UnavailableError(absl::StrCat(
        "redis is unreachable (this instance's probe fails) and limit '", limit, "' fails closed"));
  };
  // GET /healthcheck, as envoyproxy/ratelimit answers it (Envoy Gateway's probes): 500 once
  // a stop signal came, and with the options that ask for it, without Redis.
  std::atomic<bool> draining{false};
  http_options.health_check = [&draining, &stack, &options,
                               xds = xds_client.get()]() -> absl::Status {
    if (draining.load(std::memory_order_acquire)) {
      return absl::UnavailableError("draining: a stop signal came");
    }
    if (options.health_requires_config && xds != nullptr && !xds->has_config()) {
      return absl::UnavailableError("no config from xDS yet");
    }
    if (options.health_requires_redis && !stack.StoreReachable()) {
      return absl::UnavailableError("redis is unreachable (this instance's probe fails)");
    }
    return absl::OkStatus();
  };
  if (xds_client != nullptr) {
    http_options.readiness_note = [client = xds_client.get()] {
      return client->has_config() ? std::string() : std::string(kNoXdsConfigYet);
    };
  }
  absl::StatusOr<std::unique_ptr<server::HttpServer>> http =
      server::HttpServer::Start(std::move(http_options), check_service);
  if (!http.ok()) {
    spdlog::error("{}", std::string(http.status().message()));
    return 1;
  }
  // Prometheus on a listener of its own (the peer's PROMETHEUS_ADDR).
  std::unique_ptr<server::HttpServer> metrics_http;
  if (!options.metrics_address.empty()) {
    absl::StatusOr<server::ListenAddress> address =
        server::ParseListenAddress(options.metrics_address);
    if (!address.ok()) {
      spdlog::error("--metrics: {}", std::string(address.status().message()));
      return 2;
    }
    server::HttpServerOptions metrics_options;
    metrics_options.host = address->host;
    metrics_options.port = address->port;
    metrics_options.loops = loops->get();
    metrics_options.timers = monotonic;
    metrics_options.metrics = &metrics;
    metrics_options.metrics_only_path = options.metrics_path;
    absl::StatusOr<std::unique_ptr<server::HttpServer>> started =
        server::HttpServer::Start(std::move(metrics_options), check_service);
    if (!started.ok()) {
      spdlog::error("--metrics: {}", std::string(started.status().message()));
      return 1;
    }
    metrics_http = *std::move(started);
  }
  spdlog::info("tollgate {} (commit {})", kBuildVersion, kBuildCommit);
  spdlog::info("{} limits and {} Envoy domains from {}, store {}", limit_count, domain_count,
               config_files->empty() ? "no config file" : absl::StrJoin(*config_files, ", "),
               stack.shared() ? "redis" : "memory");
  if (xds_client != nullptr) {
    spdlog::info("xds: Envoy domains from {}{}", options.xds.server_address,
                 xds_client->has_config()
                     ? absl::StrCat(", version ", xds_client->applied_version())
                     : absl::StrCat(" (", kNoXdsConfigYet, ")"));
  }
  if (options.redis_url.empty()) {
    spdlog::info("memory store: at most {} keys", options.memory_max_keys);
  }
  if (tracer != nullptr) {
    spdlog::info("tracing: exporting to {}, sampling {}", tracer->url(), tracer->sampling_rate());
  }
  // Tests and scripts read these lines to learn the ports (with HOST:0); shown at warn when
  // info is off (envoyproxy/ratelimit's default LOG_LEVEL), as the peer shows its own.
  const spdlog::level::level_enum listening_level =
      spdlog::should_log(spdlog::level::info) ? spdlog::level::info : spdlog::level::warn;
  spdlog::log(listening_level, "listening grpc={}", (*grpc)->address());
  if (grpc_tls != nullptr) {
    spdlog::log(listening_level, "grpc tls: on (client certificates {})",
                grpc_tls->client_certificates_required() ? "required" : "not required");
  }
  spdlog::log(listening_level, "listening http={}", (*http)->address());
  if (metrics_http != nullptr) {
    spdlog::log(listening_level, "listening metrics={}", metrics_http->address());
  }

  Reloader reloader(options, metrics, *check_service, std::move(config_versions),
                    config_memory_store_max_keys, given.memory_max_keys > 0);
  absl::Notification stop_polling;
  std::thread poller([&] {
    while (!stop_polling.WaitForNotificationWithTimeout(kConfigPollInterval)) {
      reloader.ReloadIfChanged();
      if (grpc_tls != nullptr) grpc_tls->ReloadIfChanged();
    }
  });

  int signal_number = 0;
  while (true) {
    if (sigwait(&stop_signals, &signal_number) != 0) continue;
    if (signal_number != SIGHUP) break;
    reloader.Reload("SIGHUP");
    if (grpc_tls != nullptr) grpc_tls->Reload("SIGHUP").IgnoreError();  // logged
  }
  stop_polling.Notify();
  poller.join();
  draining.store(true, std::memory_order_release);
  if (xds_client != nullptr) xds_client->Stop();  // no config change while draining
  spdlog::info("received {}, finishing requests in flight",
               signal_number == SIGTERM ? "SIGTERM" : "SIGINT");
  // Health checks see NOT_SERVING on connections still open, while both servers drain.
  grpc_health.SetServing(false);
  (*http)->Shutdown();
  if (metrics_http != nullptr) metrics_http->Shutdown();
  bool drained = (*http)->Wait(kDrainTimeout);
  if (metrics_http != nullptr) drained = metrics_http->Wait(kDrainTimeout) && drained;
  drained = (*grpc)->Shutdown(kDrainTimeout) && drained;
  if (!drained)
    spdlog::warn("requests still in flight after {}s were dropped", kDrainTimeout.count());
  // Both servers go before the RLS service they call. The loops (declared first) stop last,
  // after the fleet has shut its connections on them down.
  http->reset();
  metrics_http.reset();
  grpc->reset();
  // Its rounds read the check service and use the fleet's connections: it goes first.
  metrics.set_rlqs_stats(nullptr);
  rlqs_service->reset();
  // Connections still closing on the loops hold the check service (and its limiters) for a
  // moment: it goes once they let go, while the loops still run, and before the fleet.
  check_service.reset();
  if (!service_released->WaitForNotificationWithTimeout(absl::FromChrono(kDrainTimeout))) {
    spdlog::warn("connections still held the check service after {}s", kDrainTimeout.count());
  }
  if (tracer != nullptr) tracer->Shutdown();  // exports what is queued, within its bound
  spdlog::info("stopped");
  return 0;
}

}  // namespace tollgate::cli
