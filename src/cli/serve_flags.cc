// Copyright tollgate authors.
#include "src/cli/serve_flags.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "src/cli/ratelimit_environment.h"
#include "src/cli/serve_environment.h"
#include "src/cli/serve_rlqs.h"

namespace tollgate::cli {

CLI::App* AddServeCommand(CLI::App& app, ServeFlags& flags) {
  ServeOptions& serve = flags.options;
  CLI::App* serve_command =
      app.add_subcommand("serve", "Serve the HTTP/JSON API and Envoy's rate-limit gRPC API");
  // No ExistingFile check: a missing file is an invalid config (exit 1), reported by the loader.
  serve_command->add_option("--config", serve.config_paths,
                            "Config file (YAML): tollgate's `limits:` or Envoy's `domain:` format; "
                            "repeatable (optional with --config-dir or --xds-server)");
  serve_command->add_option(
      "--redis", serve.redis_url,
      "Redis URL: redis://HOST:PORT, redis-cluster://HOST:PORT,..., "
      "redis-sentinel://HOST:PORT,.../MASTER, or rediss://, rediss-cluster://, rediss-sentinel:// "
      "for TLS (docs/redis.md); without it, state is in memory. A "
      "password here is seen by every local user: use TOLLGATE_REDIS or --redis-password-file");
  serve_command->add_option("--redis-url-file", serve.redis_url_file,
                            "Read the Redis URL from this file instead of --redis");
  serve_command->add_option(
      "--redis-password-file", serve.redis_password_file,
      "Read the Redis password from this file (a Kubernetes secret, a systemd credential)");
  serve_command
      ->add_option("--redis-key-prefix", serve.redis_key_prefix,
                   "Prepended to every Redis key (counters and the instance registry), so that "
                   "deployments can share a Redis")
      ->capture_default_str();
  serve_command
      ->add_option("--memory-max-keys", serve.memory_max_keys,
                   "Most entries (limit and key) the in-memory store holds; at the cap a new key "
                   "evicts the one closest to full (default: the config's memory_store.max_keys, "
                   "else 1000000)")
      ->check(CLI::Range(int64_t{1}, int64_t{1'000'000'000'000}));
  serve_command->add_option("--http", serve.http_address, "HTTP listen address HOST:PORT")
      ->capture_default_str();
  serve_command->add_option("--grpc", serve.grpc_address, "gRPC listen address HOST:PORT")
      ->capture_default_str();
  serve_command->add_flag("--shadow-mode", serve.shadow_mode,
                          "Envoy API: count decisions but never answer OVER_LIMIT");
  serve_command->add_flag("--quota-mode", serve.quota_mode,
                          "Envoy API: every rule in quota mode (envoyproxy/ratelimit's "
                          "QUOTA_MODE): refuse only when every descriptor is over its limit");
  serve_command->add_flag("--response-dynamic-metadata", serve.response_dynamic_metadata,
                          "Envoy API: answer with dynamic_metadata holding the request and the "
                          "matched rules' `metadata` (envoyproxy/ratelimit's "
                          "RESPONSE_DYNAMIC_METADATA)");
  serve_command
      ->add_option("--envoy-response-headers", serve.envoy_response_headers,
                   "Envoy API: add RateLimit-Limit, -Remaining and -Reset to the answer's "
                   "response_headers_to_add (true or false)")
      ->capture_default_str();
  serve_command
      ->add_option("--ratelimit-headers", flags.ratelimit_headers,
                   "RateLimit fields of /v1/check: draft11 (\"name\";q=10;w=2 and "
                   "\"name\";r=9;t=1), draft07 (limit=10, remaining=9, reset=1) or none (also "
                   "no X-RateLimit-* on /json)")
      ->capture_default_str()
      ->check(CLI::IsMember({"draft11", "draft07", "none"}));
  serve_command
      ->add_option("--instances", serve.instances,
                   "With --redis: fixed instance count N (default: learned)")
      ->check(CLI::Range(0, 100000));
  serve_command->add_option("--threads", serve.threads, "I/O threads (default: one per core)")
      ->check(CLI::Range(0, 1024));
  serve_command
      ->add_option("--max-descriptors", serve.max_descriptors,
                   "Most descriptors in one Envoy request (gRPC, /json) and items in one "
                   "/v1/check batch")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  serve_command
      ->add_option("--max-body-bytes", serve.max_body_bytes,
                   "Largest HTTP request body and gRPC request message")
      ->capture_default_str()
      ->check(CLI::Range(1024, 64 * 1024 * 1024));
  serve_command
      ->add_option("--max-header-bytes", serve.max_header_bytes, "Largest HTTP request head")
      ->capture_default_str()
      ->check(CLI::Range(1024, 1024 * 1024));
  serve_command
      ->add_option("--http-timeout-ms", serve.http_timeout_ms,
                   "Close an HTTP connection that is idle, or sends a request or reads a reply "
                   "more slowly than this")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{10}, int64_t{3'600'000}));
  // The gRPC port's flood limits (docs/envoy.md, "Limits").
  server::GrpcServerOptions& grpc = serve.grpc;
  const std::string grpc_group = "gRPC limits";
  serve_command
      ->add_option("--grpc-max-concurrent-streams", grpc.max_concurrent_streams,
                   "Calls open at once on one gRPC connection (SETTINGS_MAX_CONCURRENT_STREAMS)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000))
      ->group(grpc_group);
  serve_command
      ->add_option("--grpc-max-header-list-bytes", grpc.max_header_list_bytes,
                   "Largest request header list (SETTINGS_MAX_HEADER_LIST_SIZE); larger: HTTP 431")
      ->capture_default_str()
      ->check(CLI::Range(1024, 1024 * 1024))
      ->group(grpc_group);
  serve_command
      ->add_option("--grpc-max-continuations", grpc.max_continuations,
                   "CONTINUATION frames after one HEADERS; more closes the connection")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000))
      ->group(grpc_group);
  serve_command
      ->add_option("--grpc-reset-burst", grpc.reset_burst,
                   "RST_STREAM frames a connection may send at once (token bucket)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000))
      ->group(grpc_group);
  serve_command
      ->add_option("--grpc-reset-rate", grpc.reset_rate,
                   "RST_STREAM frames a second after the burst; beyond: GOAWAY and close")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000))
      ->group(grpc_group);
  serve_command
      ->add_option("--grpc-max-settings", grpc.max_settings,
                   "Entries in one SETTINGS frame; more: GOAWAY ENHANCE_YOUR_CALM")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000))
      ->group(grpc_group);
  serve_command
      ->add_option("--grpc-control-frame-burst", grpc.control_burst,
                   "SETTINGS, PING, PRIORITY and unknown frames a connection may send at once")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000))
      ->group(grpc_group);
  serve_command
      ->add_option("--grpc-control-frame-rate", grpc.control_rate,
                   "Such frames a second after the burst; beyond: GOAWAY ENHANCE_YOUR_CALM")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000))
      ->group(grpc_group);
  serve_command
      ->add_option("--grpc-max-buffered-bytes-per-connection",
                   grpc.max_buffered_bytes_per_connection,
                   "Output (and request bytes) one connection may hold; over it, it is not read")
      ->capture_default_str()
      ->check(CLI::Range(size_t{16 * 1024}, size_t{1} << 30))
      ->group(grpc_group);
  serve_command
      ->add_option("--grpc-max-buffered-bytes", grpc.max_buffered_bytes,
                   "Output all gRPC connections together may hold before they stop being read")
      ->capture_default_str()
      ->check(CLI::Range(size_t{64 * 1024}, size_t{1} << 40))
      ->group(grpc_group);
  serve_command
      ->add_option("--grpc-idle-timeout-ms", flags.grpc_idle_timeout_ms,
                   "Close a gRPC connection with no call that received nothing for this long")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{100}, int64_t{86'400'000}))
      ->group(grpc_group);
  serve_command
      ->add_option("--grpc-keepalive-interval-ms", flags.grpc_keepalive_interval_ms,
                   "PING a gRPC connection silent for this long (0: never)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{86'400'000}))
      ->group(grpc_group);
  serve_command
      ->add_option("--grpc-keepalive-timeout-ms", flags.grpc_keepalive_timeout_ms,
                   "Close a connection whose PING is not answered within this long")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{10}, int64_t{3'600'000}))
      ->group(grpc_group);
  // Config over xDS (docs/xds.md): Envoy domains from a control plane such as Envoy Gateway.
  xds::XdsClientOptions& xds = serve.xds;
  const std::string xds_group = "Config over xDS";
  serve_command
      ->add_option("--xds-server", xds.server_address,
                   "Control plane HOST:PORT to stream RateLimitConfig resources from (ADS, state "
                   "of the world); its domains serve beside the --config files'")
      ->group(xds_group);
  serve_command
      ->add_option("--xds-node-id", xds.node_id,
                   "Node id the control plane keys its snapshot by (Envoy Gateway: "
                   "envoy-ratelimit)")
      ->capture_default_str()
      ->group(xds_group);
  serve_command
      ->add_option("--xds-node-metadata", xds.node_metadata,
                   "Node metadata, KEY=VALUE[,KEY=VALUE...]")
      ->group(xds_group);
  serve_command->add_flag("--xds-tls", xds.tls.enabled, "TLS to the control plane")
      ->group(xds_group);
  serve_command
      ->add_option("--xds-tls-cert", xds.tls.client_cert_path,
                   "Client certificate (PEM) presented to the control plane")
      ->group(xds_group);
  serve_command->add_option("--xds-tls-key", xds.tls.client_key_path, "Key of --xds-tls-cert (PEM)")
      ->group(xds_group);
  serve_command
      ->add_option("--xds-tls-ca", xds.tls.server_ca_path,
                   "Authorities the control plane's certificate must chain to (PEM; default: "
                   "the system's)")
      ->group(xds_group);
  serve_command
      ->add_option("--xds-tls-server-name", xds.tls.server_name,
                   "Name the control plane's certificate must hold (default: the host of "
                   "--xds-server)")
      ->group(xds_group);
  serve_command
      ->add_option("--xds-header", xds.additional_headers,
                   "Metadata sent with the stream, KEY:VALUE (or KEY:VALUE,KEY:VALUE); "
                   "repeatable")
      ->group(xds_group);
  serve_command
      ->add_option("--xds-backoff-initial-ms", xds.backoff_initial_ms,
                   "Delay before opening the stream again after it ended (doubling, jittered)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{86'400'000}))
      ->group(xds_group);
  serve_command->add_option("--xds-backoff-max-ms", xds.backoff_max_ms, "Longest such delay")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{86'400'000}))
      ->group(xds_group);
  serve_command
      ->add_option("--xds-max-message-bytes", xds.max_message_bytes,
                   "Largest response accepted from the control plane")
      ->capture_default_str()
      ->check(CLI::Range(1024, 1 << 30))
      ->group(xds_group);
  serve_command
      ->add_flag("--start-without-config", serve.start_without_config,
                 "With --xds-server: serve at once, answering every Envoy request OK with no "
                 "limits until the first config arrives (default: open the ports only then)")
      ->group(xds_group);
  // TLS on the gRPC port (docs/envoy.md, "TLS and mTLS").
  const std::string grpc_tls_group = "gRPC TLS";
  serve_command
      ->add_option("--grpc-tls-cert", serve.grpc_tls.cert_path,
                   "Serve gRPC over TLS with this certificate (PEM, leaf first, then its "
                   "intermediates); needs --grpc-tls-key. Reloaded on SIGHUP and when it changes")
      ->group(grpc_tls_group);
  serve_command
      ->add_option("--grpc-tls-key", serve.grpc_tls.key_path,
                   "The private key of --grpc-tls-cert (PEM, unencrypted)")
      ->group(grpc_tls_group);
  serve_command
      ->add_option("--grpc-tls-client-ca", serve.grpc_tls.client_ca_path,
                   "Require a client certificate signed by a CA in this file (PEM): mTLS")
      ->group(grpc_tls_group);
  serve_command
      ->add_option("--grpc-tls-client-san", serve.grpc_tls.client_san,
                   "With --grpc-tls-client-ca: the client certificate must carry this DNS or URI "
                   "subject alternative name")
      ->group(grpc_tls_group);
  serve_command
      ->add_option("--grpc-tls-max-handshakes", grpc.max_tls_handshakes,
                   "TLS handshakes in progress at once; a connection beyond them is closed at once")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000))
      ->group(grpc_tls_group);
  serve_command
      ->add_option_function<int64_t>(
          "--grpc-tls-handshake-timeout-ms",
          [&grpc](int64_t timeout_ms) {
            grpc.tls_handshake_timeout = std::chrono::milliseconds(timeout_ms);
          },
          "Close a connection whose TLS handshake is not done within this long")
      ->default_str(std::to_string(grpc.tls_handshake_timeout.count()))
      ->check(CLI::Range(int64_t{10}, int64_t{600'000}))
      ->group(grpc_tls_group);
  // Tracing (docs/operations.md, "Tracing"): a span per ShouldRateLimit, over OTLP/HTTP.
  server::TracingOptions& tracing = serve.tracing;
  const std::string tracing_group = "Tracing";
  serve_command
      ->add_option("--tracing-endpoint", flags.tracing_endpoint,
                   "Turns tracing on: the OpenTelemetry collector's OTLP/HTTP base URL, "
                   "http://HOST:PORT (spans go to its /v1/traces)")
      ->group(tracing_group);
  serve_command
      ->add_option("--tracing-sampling-rate", tracing.sampling_rate,
                   "Fraction of calls without a traceparent that are traced (a traceparent's "
                   "sampled flag decides for the others)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0))
      ->group(tracing_group);
  serve_command->add_option("--tracing-service-name", tracing.service_name, "Spans' service.name")
      ->capture_default_str()
      ->group(tracing_group);
  serve_command
      ->add_option("--tracing-service-namespace", tracing.service_namespace,
                   "Spans' service.namespace")
      ->group(tracing_group);
  serve_command
      ->add_option("--tracing-service-instance-id", tracing.service_instance_id,
                   "Spans' service.instance.id (default: a random UUID at start)")
      ->group(tracing_group);
  serve_command->add_option("--log-level", flags.log_level, "trace, debug, info, warn, error, off")
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));

  // envoyproxy/ratelimit's deployments (docs/envoy-gateway.md).
  const std::string peer_group = "Envoy Gateway and envoyproxy/ratelimit";
  serve_command
      ->add_option("--env", flags.env,
                   "Read another service's environment for the defaults: envoy-ratelimit "
                   "(envoyproxy/ratelimit's variables, as Envoy Gateway sets them; also when "
                   "the binary is called as `ratelimit`)")
      ->check(CLI::IsMember({std::string(kRatelimitEnvironmentName)}))
      ->group(peer_group);
  serve_command
      ->add_option("--config-dir", serve.config_dirs,
                   "A directory whose every file (in any subdirectory) is a config file, "
                   "looked at again every second for files added, changed or removed; "
                   "repeatable")
      ->group(peer_group);
  serve_command
      ->add_flag("--config-ignore-dotfiles", serve.config_ignore_dotfiles,
                 "In --config-dir, skip names that start with '.' (a mounted ConfigMap's "
                 "..data links)")
      ->group(peer_group);
  serve_command
      ->add_option("--default-algorithm", flags.default_algorithm,
                   "Algorithm of Envoy rules that name none: fixed_window, sliding_window or "
                   "token_bucket")
      ->capture_default_str()
      ->check(CLI::IsMember({"fixed_window", "sliding_window", "token_bucket"}))
      ->group(peer_group);
  serve_command
      ->add_flag("--descriptor-hits-are-requests", serve.descriptor_hits_are_requests,
                 "Envoy API: a descriptor's own hits_addend is a request (a refusal counts "
                 "nothing) instead of a report charged in full (the peer's "
                 "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT)")
      ->group(peer_group);
  serve_command
      ->add_option("--metrics", serve.metrics_address,
                   "Serve GET --metrics-path on a listener of its own, HOST:PORT (beside "
                   "/metrics on the HTTP port)")
      ->group(peer_group);
  serve_command->add_option("--metrics-path", serve.metrics_path, "The path --metrics serves")
      ->capture_default_str()
      ->group(peer_group);
  serve_command
      ->add_flag("--ratelimit-metrics", serve.ratelimit_metrics,
                 "Also export envoyproxy/ratelimit's metric names per Envoy rule "
                 "(ratelimit_service_rate_limit_total_hits, ...)")
      ->group(peer_group);
  serve_command
      ->add_option("--near-limit-ratio", serve.near_limit_ratio,
                   "With --ratelimit-metrics: an allowed request past this fraction of its "
                   "limit counts as near_limit")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0))
      ->group(peer_group);
  serve_command
      ->add_flag("--health-requires-config", serve.health_requires_config,
                 "GET /healthcheck answers 500 until a config is loaded")
      ->group(peer_group);
  serve_command
      ->add_flag("--health-requires-redis", serve.health_requires_redis,
                 "GET /healthcheck answers 500 while this instance's probe of Redis fails")
      ->group(peer_group);
  serve_command
      ->add_option("--redis-startup-wait-ms", serve.redis_startup_wait_ms,
                   "When Redis is unreachable at start, keep trying for this long (-1: for "
                   "ever) instead of exiting")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{-1}, int64_t{86'400'000}))
      ->group(peer_group);
  serve_command->add_option("--log-format", flags.log_format, "text, or json (one object a line)")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "json"}));

  AddRlqsFlags(*serve_command, serve.rlqs, serve.grpc);  // serve_rlqs.cc
  // Every option above also from the environment, TOLLGATE_<OPTION>; the command line wins.
  ReadOptionsFromEnvironment(*serve_command);
  serve_command->footer(
      "Every option can also be set in the environment, as TOLLGATE_ and its name in capitals "
      "(shown beside each, such as TOLLGATE_REDIS); the command line wins.");
  return serve_command;
}

absl::Status FinishServeFlags(ServeFlags& flags) {
  ServeOptions& options = flags.options;
  options.grpc.idle_timeout = std::chrono::milliseconds(flags.grpc_idle_timeout_ms);
  options.grpc.keepalive_interval = std::chrono::milliseconds(flags.grpc_keepalive_interval_ms);
  options.grpc.keepalive_timeout = std::chrono::milliseconds(flags.grpc_keepalive_timeout_ms);
  // Both checked by IsMember.
  options.ratelimit_headers = server::ParseRateLimitHeaderFormat(flags.ratelimit_headers)
                                  .value_or(server::RateLimitHeaderFormat::kDraft11);
  if (!flags.tracing_endpoint.empty()) {
    options.tracing.enabled = true;
    options.tracing.endpoint = flags.tracing_endpoint;
  }
  options.default_algorithm = flags.default_algorithm == "token_bucket" ? Algorithm::kTokenBucket
                              : flags.default_algorithm == "sliding_window"
                                  ? Algorithm::kSlidingWindow
                                  : Algorithm::kFixedWindow;
  if (options.config_paths.empty() && options.config_dirs.empty() &&
      options.xds.server_address.empty()) {
    return absl::InvalidArgumentError(
        "serve needs a config: --config FILE, --config-dir DIR or --xds-server HOST:PORT (in "
        "envoyproxy/ratelimit's environment: RUNTIME_ROOT, or CONFIG_TYPE=GRPC_XDS_SOTW)");
  }
  return absl::OkStatus();
}

std::optional<std::string> FindEnvFlag(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--env") == 0 && i + 1 < argc) return std::string(argv[i + 1]);
    if (std::strncmp(argv[i], "--env=", 6) == 0) return std::string(argv[i] + 6);
  }
  const char* from_environment = std::getenv("TOLLGATE_ENV");
  if (from_environment != nullptr && *from_environment != '\0')
    return std::string(from_environment);
  return std::nullopt;
}

}  // namespace tollgate::cli
