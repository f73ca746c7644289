// Copyright tollgate authors.
#include "src/cli/ratelimit_environment.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "src/cli/environment_reader.h"
#include "src/cli/go_values.h"
#include "src/cli/ratelimit_redis.h"
#include "src/cli/serve_environment.h"
#include "src/core/absl_view.h"

namespace tollgate::cli {
namespace {

// "HOST:PORT" from the peer's pair of variables; Go's empty host (":8080") is every address.
std::string JoinHostPort(std::string host, int64_t port) {
  if (host.empty()) host = "0.0.0.0";
  if (absl::StrContains(host, ':') && !absl::StartsWith(host, "["))
    host = absl::StrCat("[", host, "]");
  return absl::StrCat(host, ":", port);
}

// The peer's ":9090" form (Go's net.Listen address): an empty host is every address.
std::string ListenAddressOf(std::string address) {
  if (absl::StartsWith(address, ":")) return absl::StrCat("0.0.0.0", address);
  return address;
}

// LOG_LEVEL as logrus reads it (any case), in spdlog's names.
std::optional<std::string> LogLevel(std::string_view text) {
  const std::string level = absl::AsciiStrToLower(AbslView(text));
  if (level == "panic" || level == "fatal") return "critical";
  if (level == "error") return "err";
  if (level == "warn" || level == "warning") return "warn";
  if (level == "info" || level == "debug" || level == "trace") return level;
  return std::nullopt;
}

void ReadListeners(EnvironmentReader& env, ServeOptions& options) {
  options.http_address =
      JoinHostPort(env.String("HOST", "0.0.0.0"), env.Int("PORT", 8080, 0, 65535));
  options.grpc_address =
      JoinHostPort(env.String("GRPC_HOST", "0.0.0.0"), env.Int("GRPC_PORT", 8081, 0, 65535));
  if (env.Get("GRPC_UDS")) {
    env.Error("GRPC_UDS", "a Unix socket for gRPC is not supported; use GRPC_HOST and GRPC_PORT");
  }
  const char* kDebug =
      "the peer's debug listener (pprof, /rlconfig) is not served; /metrics "
      "and /healthcheck are on the HTTP port";
  env.NotUsed("DEBUG_HOST", kDebug);
  env.NotUsed("DEBUG_PORT", kDebug);
  const char* kAge =
      "gRPC connections are not aged out; they close when idle "
      "(--grpc-idle-timeout-ms)";
  env.NotUsed("GRPC_MAX_CONNECTION_AGE", kAge);
  env.NotUsed("GRPC_MAX_CONNECTION_AGE_GRACE", kAge);
}

// GRPC_SERVER_USE_TLS and its files. The client CA has two names: the peer's
// GRPC_CLIENT_TLS_CACERT, and GRPC_SERVER_TLS_CA_CERT, which Envoy Gateway sets (and the
// peer does not read); either asks for client certificates.
void ReadGrpcTls(EnvironmentReader& env, ServeOptions& options) {
  const char* kFiles[] = {"GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT",
                          "GRPC_SERVER_TLS_CA_CERT", "GRPC_CLIENT_TLS_SAN"};
  if (!env.Bool("GRPC_SERVER_USE_TLS", false)) {
    for (const char* name : kFiles) {
      env.NotUsed(name, "GRPC_SERVER_USE_TLS is not true, so gRPC is served without TLS");
    }
    return;
  }
  server::GrpcTlsFiles& tls = options.grpc_tls;
  tls.cert_path = env.String("GRPC_SERVER_TLS_CERT", "");
  tls.key_path = env.String("GRPC_SERVER_TLS_KEY", "");
  if (tls.cert_path.empty()) env.Error("GRPC_SERVER_TLS_CERT", "GRPC_SERVER_USE_TLS needs it");
  if (tls.key_path.empty()) env.Error("GRPC_SERVER_TLS_KEY", "GRPC_SERVER_USE_TLS needs it");
  const std::string peer_ca = env.String("GRPC_CLIENT_TLS_CACERT", "");
  const std::string gateway_ca = env.String("GRPC_SERVER_TLS_CA_CERT", "");
  if (!peer_ca.empty() && !gateway_ca.empty() && peer_ca != gateway_ca) {
    env.Error("GRPC_SERVER_TLS_CA_CERT",
              "names another file than GRPC_CLIENT_TLS_CACERT; both give the CA of client "
              "certificates: give one");
  }
  tls.client_ca_path = peer_ca.empty() ? gateway_ca : peer_ca;
  tls.client_san = env.String("GRPC_CLIENT_TLS_SAN", "");
  if (!tls.client_san.empty() && tls.client_ca_path.empty()) {
    env.Error("GRPC_CLIENT_TLS_SAN",
              "needs GRPC_CLIENT_TLS_CACERT: a SAN is checked on a "
              "client certificate, which only a CA asks for");
  }
}

// CONFIG_TYPE=GRPC_XDS_SOTW: the xDS client (src/xds/xds_options.h names each variable).
void ReadXds(EnvironmentReader& env, ServeOptions& options) {
  xds::XdsClientOptions& xds = options.xds;
  xds.server_address = env.String("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000");
  xds.node_id = env.String("CONFIG_GRPC_XDS_NODE_ID", "default");
  xds.node_metadata = env.String("CONFIG_GRPC_XDS_NODE_METADATA", "");
  if (std::optional<std::string> headers = env.Get("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS")) {
    if (!ParseGoMap(*headers)) {
      env.Error("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "expected key:value[,key:value...]");
    } else {
      xds.additional_headers.push_back(*headers);
    }
  }
  xds.tls.enabled = env.Bool("CONFIG_GRPC_XDS_SERVER_USE_TLS", false);
  xds.tls.client_cert_path = env.String("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "");
  xds.tls.client_key_path = env.String("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "");
  xds.tls.server_ca_path = env.String("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "");
  xds.tls.server_name = env.String("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "");
  if (xds.tls.client_cert_path.empty() != xds.tls.client_key_path.empty()) {
    env.Error(xds.tls.client_cert_path.empty() ? "CONFIG_GRPC_XDS_CLIENT_TLS_CERT"
                                               : "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
              "a client certificate needs its key, and a key its certificate");
  }
  xds.backoff_initial_ms = env.DurationMs("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", 10'000);
  xds.backoff_max_ms = env.DurationMs("XDS_CLIENT_BACKOFF_MAX_INTERVAL", 60'000);
  xds.backoff_random_factor = env.Float("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", 0.5, 0, 1);
  if (!env.Bool("XDS_CLIENT_BACKOFF_JITTER", true)) xds.backoff_random_factor = 0;
  if (xds.backoff_initial_ms < 1) env.Error("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "must be > 0");
  if (xds.backoff_max_ms < xds.backoff_initial_ms) {
    env.Error("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "must be at least the initial interval");
  }
  xds.max_message_bytes = static_cast<int>(
      env.Int("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", xds.max_message_bytes, 1024, 1 << 30));
  env.NotUsed("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
              "the xDS client reconnects on one backoff (XDS_CLIENT_BACKOFF_*)");
  options.start_without_config = env.Bool("FORCE_START_WITHOUT_INITIAL_CONFIG", false);
}

// TRACING_* and OpenTelemetry's endpoint variables.
void ReadTracing(EnvironmentReader& env, ServeOptions& options) {
  server::TracingOptions& tracing = options.tracing;
  const char* kNames[] = {"TRACING_SERVICE_NAME",
                          "TRACING_SERVICE_NAMESPACE",
                          "TRACING_SERVICE_INSTANCE_ID",
                          "TRACING_SAMPLING_RATE",
                          "TRACING_EXPORTER_PROTOCOL",
                          "OTEL_EXPORTER_OTLP_ENDPOINT",
                          "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"};
  if (!env.Bool("TRACING_ENABLED", false)) {
    for (const char* name : kNames) {
      env.NotUsed(name, "TRACING_ENABLED is not true, so nothing is traced");
    }
    return;
  }
  tracing.enabled = true;
  tracing.service_name = env.String("TRACING_SERVICE_NAME", "RateLimit");
  tracing.service_namespace = env.String("TRACING_SERVICE_NAMESPACE", "");
  tracing.service_instance_id = env.String("TRACING_SERVICE_INSTANCE_ID", "");
  tracing.sampling_rate = env.Float("TRACING_SAMPLING_RATE", 1, 0, 1);
  const std::string protocol =
      absl::AsciiStrToLower(env.String("TRACING_EXPORTER_PROTOCOL", "http"));
  if (protocol != "http") {
    env.Error("TRACING_EXPORTER_PROTOCOL",
              "only http (OTLP over HTTP with protobuf) is supported; point "
              "OTEL_EXPORTER_OTLP_ENDPOINT at the collector's OTLP/HTTP port (4318)");
  }
  tracing.endpoint = env.String("OTEL_EXPORTER_OTLP_ENDPOINT", tracing.endpoint);
  tracing.traces_endpoint = env.String("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "");
  for (const auto& [name, url] :
       {std::pair<const char*, std::string>{"OTEL_EXPORTER_OTLP_ENDPOINT", tracing.endpoint},
        {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", tracing.traces_endpoint}}) {
    if (!url.empty() && !absl::StartsWith(url, "http://")) {
      env.Error(name, "expected an http:// URL (https is not supported for the collector)");
    }
  }
}

void ReadConfigSource(EnvironmentReader& env, ServeOptions& options) {
  const std::string type = env.String("CONFIG_TYPE", "FILE");
  if (type == "FILE") {
    // The peer loads <RUNTIME_ROOT>/<RUNTIME_SUBDIRECTORY>/<RUNTIME_APPDIRECTORY> (with
    // RUNTIME_WATCH_ROOT, the files of <ROOT>/<SUBDIRECTORY> under <APPDIRECTORY>: the same
    // files). tollgate looks at that directory every second either way.
    std::string dir = env.String("RUNTIME_ROOT", "/srv/runtime_data/current");
    for (const std::string& part :
         {env.String("RUNTIME_SUBDIRECTORY", ""), env.String("RUNTIME_APPDIRECTORY", "config")}) {
      if (part.empty()) continue;
      if (!absl::EndsWith(dir, "/")) dir += "/";
      dir += part;
    }
    options.config_dirs.push_back(dir);
    options.config_ignore_dotfiles = env.Bool("RUNTIME_IGNOREDOTFILES", false);
    env.Bool("RUNTIME_WATCH_ROOT", true);  // checked; both ways are watched alike
  } else if (type == "GRPC_XDS_SOTW") {
    ReadXds(env, options);
  } else {
    env.Error("CONFIG_TYPE", "expected FILE or GRPC_XDS_SOTW");
  }
  if (env.Bool("MERGE_DOMAIN_CONFIG", false)) {
    env.Error("MERGE_DOMAIN_CONFIG",
              "merging a domain from several files is not supported: give each domain in one "
              "file (or one RateLimitConfig)");
  }
  options.health_requires_config = env.Bool("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false);
}

void ReadStats(EnvironmentReader& env, ServeOptions& options) {
  const char* kStatsd =
      "statsd is not supported; metrics are for Prometheus (USE_PROMETHEUS, "
      "or GET /metrics on the HTTP port)";
  if (env.Get("USE_STATSD") && env.Bool("USE_STATSD", true)) {
    env.notices().push_back(absl::StrCat("USE_STATSD is not used by tollgate: ", kStatsd));
  }
  for (std::string_view name :
       {"STATSD_HOST", "STATSD_PORT", "USE_DOG_STATSD", "USE_DOG_STATSD_MOGRIFIERS",
        "STATS_FLUSH_INTERVAL", "EXTRA_TAGS"}) {
    env.NotUsed(name, kStatsd);
  }
  env.NotUsed("DISABLE_STATS", "tollgate's metrics are always kept");
  if (env.Bool("USE_PROMETHEUS", false)) {
    options.metrics_address = ListenAddressOf(env.String("PROMETHEUS_ADDR", ":9090"));
    options.metrics_path = env.String("PROMETHEUS_PATH", "/metrics");
    if (!absl::StartsWith(options.metrics_path, "/")) {
      env.Error("PROMETHEUS_PATH", "expected a path starting with /");
    }
  }
  env.NotUsed("PROMETHEUS_MAPPER_YAML",
              "the peer's statistics are served under the names of its default mapping "
              "(ratelimit_service_*, docs/envoy-gateway.md); a mapping file is not read");
  env.NotUsed("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
              "ratelimit_service_response_time_seconds is in seconds");
  options.ratelimit_metrics = true;
  options.near_limit_ratio = env.Float("NEAR_LIMIT_RATIO", 0.8, 0, 1);
}

void ReadLimiting(EnvironmentReader& env, ServeOptions& options) {
  options.shadow_mode = env.Bool("SHADOW_MODE", false);
  options.quota_mode = env.Bool("QUOTA_MODE", false);
  options.response_dynamic_metadata = env.Bool("RESPONSE_DYNAMIC_METADATA", false);
  options.descriptor_hits_are_requests = env.Bool("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false);
  const std::string backend = env.String("BACKEND_TYPE", "redis");
  if (absl::AsciiStrToLower(backend) != "redis") {
    env.Error("BACKEND_TYPE", "only redis is supported");
  }
  env.NotUsed("EXPIRATION_JITTER_MAX_SECONDS",
              "tollgate's keys expire when their window ends or their bucket is full again, "
              "exactly");
  env.NotUsed("LOCAL_CACHE_SIZE_IN_BYTES",
              "there is no local over-limit cache; hot keys can use `mode: sync` limits instead");
  if (std::optional<std::string> prefix = env.Get("CACHE_KEY_PREFIX")) {
    options.redis_key_prefix = *prefix;
  }
  options.envoy_response_headers = env.Bool("LIMIT_RESPONSE_HEADERS_ENABLED", false);
  const std::pair<std::string_view, std::string_view> kHeaderNames[] = {
      {"LIMIT_LIMIT_HEADER", "RateLimit-Limit"},
      {"LIMIT_REMAINING_HEADER", "RateLimit-Remaining"},
      {"LIMIT_RESET_HEADER", "RateLimit-Reset"}};
  for (const auto& [variable, name] : kHeaderNames) {
    if (std::optional<std::string> given = env.Get(variable); given && *given != name) {
      env.Error(variable, absl::StrCat("other header names are not supported (tollgate sends ",
                                       AbslView(name), ")"));
    }
  }
  for (std::string_view name :
       {"MEMCACHE_HOST_PORT", "MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_SRV", "MEMCACHE_SRV_REFRESH",
        "MEMCACHE_TLS", "MEMCACHE_TLS_CLIENT_CERT", "MEMCACHE_TLS_CLIENT_KEY",
        "MEMCACHE_TLS_CACERT", "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION"}) {
    env.NotUsed(name, "memcached is not supported");
  }
}

}  // namespace

bool CalledAsRatelimit(std::string_view argv0) {
  const size_t slash = argv0.rfind('/');
  return argv0.substr(slash == std::string_view::npos ? 0 : slash + 1) == "ratelimit";
}

EnvironmentLookup ProcessEnvironment() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

absl::StatusOr<RatelimitEnvironment> ReadRatelimitEnvironment(const EnvironmentLookup& lookup,
                                                              ServeOptions base) {
  EnvironmentReader env(lookup);
  RatelimitEnvironment result;
  result.options = std::move(base);
  ServeOptions& options = result.options;
  ReadListeners(env, options);
  ReadGrpcTls(env, options);
  ReadTracing(env, options);
  ReadConfigSource(env, options);
  ReadStats(env, options);
  ReadLimiting(env, options);
  ReadRedisVariables(env, options);
  const std::string level = env.String("LOG_LEVEL", "warn");
  if (std::optional<std::string> spdlog_level = LogLevel(level)) {
    result.log_level = *spdlog_level;
  } else {
    env.Error("LOG_LEVEL", "expected trace, debug, info, warn, error, fatal or panic");
  }
  const std::string format = absl::AsciiStrToLower(env.String("LOG_FORMAT", "text"));
  if (format != "text" && format != "json") env.Error("LOG_FORMAT", "expected text or json");
  result.json_logs = format == "json";
  if (!env.errors().empty()) {
    return absl::InvalidArgumentError(absl::StrJoin(env.errors(), "\n"));
  }
  result.notices = std::move(env.notices());
  return result;
}

}  // namespace tollgate::cli
