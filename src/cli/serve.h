// Copyright tollgate authors. `tollgate serve`: the rate-limit service.
#ifndef TOLLGATE_SRC_CLI_SERVE_H_
#define TOLLGATE_SRC_CLI_SERVE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/config/loaded_configs.h"
#include "src/rlqs/ledger.h"
#include "src/server/grpc_server.h"
#include "src/server/grpc_tls.h"
#include "src/server/ratelimit_headers.h"
#include "src/server/tracing.h"
#include "src/xds/xds_options.h"
#include "tollgate/limit.h"

namespace tollgate::cli {

// The memory store's cap when neither --memory-max-keys nor `memory_store.max_keys` sets it.
inline constexpr int64_t kDefaultMemoryMaxKeys = 1'000'000;

struct ServeOptions {
  // One or more files, each in tollgate's `limits:` format or Envoy's `domain:` format.
  std::vector<std::string> config_paths;
  // Empty (and no redis_url_file): the embedded in-memory store.
  std::string redis_url;
  // The Redis URL read from this file instead (exclusive with redis_url), and the password
  // read from this one (added to the URL's credentials): secrets kept off the command line
  // (ResolveRedisUrl in serve_environment.h).
  std::string redis_url_file;
  std::string redis_password_file;
  // The embedded in-memory store's cap on entries (MemoryStoreOptions::max_keys); with
  // Redis, the cap on the local fallback limiters' keys. 0: the config's
  // `memory_store.max_keys`, else kDefaultMemoryMaxKeys.
  int64_t memory_max_keys = 0;
  std::string http_address = "127.0.0.1:8080";
  // Envoy's rate-limit service (gRPC) and the gRPC health service.
  std::string grpc_address = "127.0.0.1:8081";
  // I/O threads; 0 means one per hardware thread.
  int threads = 0;
  // Envoy API: compute and count, never answer OVER_LIMIT.
  bool shadow_mode = false;
  // Envoy API: every rule in quota mode (envoyproxy/ratelimit's QUOTA_MODE; rls_plan.h).
  bool quota_mode = false;
  // Envoy API: the response's dynamic_metadata carries the request and the `metadata` of the
  // rules that passed (envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA; rls_plan.h).
  bool response_dynamic_metadata = false;
  // Envoy API: RateLimit-Limit, -Remaining and -Reset in the answer's response_headers_to_add
  // (envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED, off by default there).
  bool envoy_response_headers = true;
  // The RateLimit fields of POST /v1/check; kNone also drops POST /json's X-RateLimit-*.
  server::RateLimitHeaderFormat ratelimit_headers = server::RateLimitHeaderFormat::kDraft11;
  // With --redis: a fixed instance count N instead of the learned one (0: learn it).
  int64_t instances = 0;
  // Bounds on what one client may send (see docs/http.md, "Limits").
  // Descriptors of one Envoy request (gRPC and POST /json), and items of one POST
  // /v1/check {"checks": [...]}.
  int max_descriptors = 64;
  // An HTTP request body; also the largest gRPC request message.
  int max_body_bytes = 64 * 1024;
  // An HTTP request head (request line and headers).
  int max_header_bytes = 8 * 1024;
  // An HTTP connection that does not deliver a whole request head (or body) within this
  // long, or does not read its reply within this long, is closed; so is an idle one.
  int64_t http_timeout_ms = 10'000;
  // The gRPC port's flood limits (--grpc-...; docs/envoy.md, "Limits"). Its `address` is
  // taken from grpc_address and its `max_message_bytes` from max_body_bytes.
  server::GrpcServerOptions grpc;
  // TLS on the gRPC port (--grpc-tls-*; docs/envoy.md, "TLS and mTLS"); all empty: plaintext.
  // Its handshake bounds are grpc.max_tls_handshakes and grpc.tls_handshake_timeout.
  server::GrpcTlsFiles grpc_tls;
  // Envoy's Rate Limit Quota Service on the gRPC port (--rlqs-*; src/cli/serve_rlqs.h). Its
  // key_prefix is redis_key_prefix.
  rlqs::RlqsLedgerOptions rlqs;

  // Prepended to every Redis key tollgate writes (its counters and the instance registry), so
  // that several deployments can share one Redis (the peer's CACHE_KEY_PREFIX).
  std::string redis_key_prefix = "tollgate:";

  // ---- envoyproxy/ratelimit's deployments (docs/envoy-gateway.md) ----
  // Directories whose files (every regular file, in any subdirectory) are config files, as
  // envoyproxy/ratelimit's runtime directory: listed again at each look for changes, so a
  // file added, changed or removed is picked up. Beside config_paths.
  std::vector<std::string> config_dirs;
  // Skip files and directories whose names start with '.' in config_dirs (Kubernetes' ..data
  // links of a mounted ConfigMap would otherwise give every file twice).
  bool config_ignore_dotfiles = false;
  // A listener of its own for GET `metrics_path` (Prometheus), "HOST:PORT"; empty: none
  // (GET /metrics on the HTTP port is always there).
  std::string metrics_address;
  std::string metrics_path = "/metrics";
  // envoyproxy/ratelimit's metric families (ratelimit_service_*, per Envoy rule, as Envoy
  // Gateway's default mapping names them) beside tollgate's; NEAR_LIMIT_RATIO's ratio.
  bool ratelimit_metrics = false;
  double near_limit_ratio = 0.8;
  // Envoy rules that name no `algorithm` use this one (Envoy Gateway's API can only say "N
  // per unit").
  Algorithm default_algorithm = Algorithm::kFixedWindow;
  // Envoy API: a descriptor's own hits_addend is a request (all or nothing, a refusal spends
  // nothing; the peer's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT) instead of a report charged
  // in full (rls_plan.h).
  bool descriptor_hits_are_requests = false;
  // GET /healthcheck answers 500 until a config is loaded (the peer's
  // HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED), and while this instance's probe of Redis fails
  // (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION).
  bool health_requires_config = false;
  bool health_requires_redis = false;
  // Redis unreachable at start: retry (after initial, doubling up to max) for up to
  // redis_startup_wait_ms (-1: for ever) instead of exiting at once (0).
  int64_t redis_startup_wait_ms = 0;
  int64_t redis_startup_retry_initial_ms = 1'000;
  int64_t redis_startup_retry_max_ms = 30'000;

  // Config over xDS (--xds-...; docs/xds.md; src/cli/serve_xds.h): on when
  // xds.server_address is set (envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW with
  // CONFIG_GRPC_XDS_SERVER_URL; each field of XdsClientOptions names its variable). The
  // control plane's domains serve beside the config_paths files' (which are then optional);
  // a domain in both is refused (the update is NACKed, or the file reload fails).
  xds::XdsClientOptions xds;
  // With xDS: serve at once, every Envoy request answered OK with no limits (and /readyz
  // saying so) until the first config is applied (FORCE_START_WITHOUT_INITIAL_CONFIG).
  // false: the ports open only once the first config is applied, however long that takes.
  bool start_without_config = false;
  // Tracing: a span per ShouldRateLimit call (gRPC and POST /json), exported over OTLP/HTTP
  // (docs/operations.md, "Tracing"). Each field, its flag, and envoyproxy/ratelimit's variable:
  // - enabled (default false): on when --tracing-endpoint is given; TRACING_ENABLED=true.
  // - endpoint (default http://localhost:4318, OpenTelemetry's): --tracing-endpoint; the base
  //   URL, http:// only, "/v1/traces" appended; OTEL_EXPORTER_OTLP_ENDPOINT.
  // - traces_endpoint (default ""): no flag; the full URL, used as is, wins over endpoint;
  //   OTEL_EXPORTER_OTLP_TRACES_ENDPOINT.
  // - service_name (default "tollgate"): --tracing-service-name; TRACING_SERVICE_NAME, whose
  //   default in envoyproxy/ratelimit is "RateLimit" (set that when mapping its environment).
  // - service_namespace (default ""): --tracing-service-namespace; TRACING_SERVICE_NAMESPACE.
  // - service_instance_id (default "": a random UUID at start, as envoyproxy/ratelimit):
  //   --tracing-service-instance-id; TRACING_SERVICE_INSTANCE_ID.
  // - sampling_rate (default 1, 0..1): --tracing-sampling-rate; TRACING_SAMPLING_RATE. Applies
  //   to calls without a traceparent; a traceparent's sampled flag decides for the others.
  // - the exporter's bounds (queue, batch, flush interval, timeouts): no flags; defaults in
  //   src/server/tracing.h.
  // TRACING_EXPORTER_PROTOCOL=grpc has no counterpart: tollgate exports over OTLP/HTTP only.
  server::TracingOptions tracing;
};

// Loads the configs (and with options.xds, waits for the control plane's first config unless
// start_without_config), connects the fleet (tollgate/fleet.h: in memory without
// `redis_url`, at most `memory_max_keys` entries; else Redis behind deadlines, a circuit
// breaker and each limit's failure policy, with N learned from heartbeats in the group the
// config names, src/cli/instance_group.h) on the service's event loops, and serves HTTP and
// gRPC until SIGTERM or SIGINT,
// then finishes the requests in flight. On SIGHUP, and when a config file changes (looked
// at every second), reloads every config file: a valid whole replaces the running config
// without dropping requests (counters carry on in the store); an invalid one is logged and
// the old config keeps serving. The gRPC port's TLS files are reloaded the same way (on
// SIGHUP, and when their contents change), for new connections. Returns the process exit
// code: 0 after a clean shutdown, 1 for an invalid config or TLS file, an unreachable Redis
// or an address that cannot be bound, 2 for unusable options (among them: no config at all:
// neither config_paths, config_dirs nor xds.server_address).
int RunServe(const ServeOptions& options);

}  // namespace tollgate::cli

#endif  // TOLLGATE_SRC_CLI_SERVE_H_
