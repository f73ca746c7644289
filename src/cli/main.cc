// Copyright tollgate authors. The one binary: `tollgate serve | validate | check`.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "src/cli/check.h"
#include "src/cli/serve.h"
#include "src/cli/serve_environment.h"
#include "src/cli/validate.h"
#include "src/core/build_info.h"

int main(int argc, char** argv) {
  // Debian's Abseil is built with deadlock detection on: every Mutex lock would also update a
  // process-wide lock graph under a global lock, serialising the event loops.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Logs go to stderr; stdout is for command output (validate, check).
  spdlog::set_default_logger(spdlog::stderr_color_mt("tollgate"));

  CLI::App app("tollgate: a distributed rate limiter", "tollgate");
  app.require_subcommand(1);
  // `tollgate --version` prints "tollgate VERSION (commit COMMIT)" to stdout and exits 0.
  app.set_version_flag("--version",
                       std::string("tollgate ") + tollgate::kBuildVersion + " (commit " +
                           tollgate::kBuildCommit + ")",
                       "Print the version and the commit it was built from, then exit");

  tollgate::cli::ServeOptions serve;
  std::string log_level = "info";
  CLI::App* serve_command =
      app.add_subcommand("serve", "Serve the HTTP/JSON API and Envoy's rate-limit gRPC API");
  // No ExistingFile check: a missing file is an invalid config (exit 1), reported by the loader.
  serve_command
      ->add_option("--config", serve.config_paths,
                   "Config file (YAML): tollgate's `limits:` or Envoy's `domain:` format; "
                   "repeatable")
      ->required();
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
  std::string ratelimit_headers = "draft11";
  serve_command
      ->add_option("--ratelimit-headers", ratelimit_headers,
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
  tollgate::server::GrpcServerOptions& grpc = serve.grpc;
  int64_t grpc_idle_timeout_ms = grpc.idle_timeout.count();
  int64_t grpc_keepalive_interval_ms = grpc.keepalive_interval.count();
  int64_t grpc_keepalive_timeout_ms = grpc.keepalive_timeout.count();
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
      ->add_option("--grpc-idle-timeout-ms", grpc_idle_timeout_ms,
                   "Close a gRPC connection with no call that received nothing for this long")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{100}, int64_t{86'400'000}))
      ->group(grpc_group);
  serve_command
      ->add_option("--grpc-keepalive-interval-ms", grpc_keepalive_interval_ms,
                   "PING a gRPC connection silent for this long (0: never)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{86'400'000}))
      ->group(grpc_group);
  serve_command
      ->add_option("--grpc-keepalive-timeout-ms", grpc_keepalive_timeout_ms,
                   "Close a connection whose PING is not answered within this long")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{10}, int64_t{3'600'000}))
      ->group(grpc_group);
  // Tracing (docs/operations.md, "Tracing"): a span per ShouldRateLimit, over OTLP/HTTP.
  tollgate::server::TracingOptions& tracing = serve.tracing;
  std::string tracing_endpoint;
  const std::string tracing_group = "Tracing";
  serve_command
      ->add_option("--tracing-endpoint", tracing_endpoint,
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
  serve_command->add_option("--log-level", log_level, "trace, debug, info, warn, error, off")
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));

  // Every option above also from the environment, TOLLGATE_<OPTION>; the command line wins.
  tollgate::cli::ReadOptionsFromEnvironment(*serve_command);
  serve_command->footer(
      "Every option can also be set in the environment, as TOLLGATE_ and its name in capitals "
      "(shown beside each, such as TOLLGATE_REDIS); the command line wins.");

  std::vector<std::string> validate_paths;
  CLI::App* validate_command = app.add_subcommand("validate", "Check config files and exit");
  validate_command->add_option("--config", validate_paths, "Config file (YAML); repeatable")
      ->required();

  tollgate::cli::CheckOptions check;
  CLI::App* check_command = app.add_subcommand(
      "check", "Send one request to a running server: one limit, several, or Envoy descriptors");
  check_command->add_option("--url", check.url, "Server URL")->capture_default_str();
  check_command->add_option("--limit", check.limits,
                            "Limit name; repeat it to check several limits at once, all or "
                            "nothing (POST /v1/check)");
  check_command->add_option("--key", check.keys,
                            "Key, such as user:42: once for every --limit, or once per --limit");
  check_command
      ->add_option("--cost", check.costs,
                   "Units to consume (default 1, 0 peeks): once for every --limit, or "
                   "once per --limit; with --domain, the hits_addend")
      ->check(CLI::NonNegativeNumber);
  check_command->add_option("--domain", check.domain,
                            "Envoy's form (POST /json): the domain of the --descriptor entries");
  check_command->add_option("--descriptor", check.descriptors,
                            "With --domain: one descriptor, key=value[,key=value...]; repeatable");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    if (code == 0) return 0;  // help
    // The offending value may have come from the environment: name the variables (never
    // their values, which may be secrets).
    const std::vector<std::string> from_environment =
        tollgate::cli::OptionEnvironmentVariablesSet(*serve_command);
    if (*serve_command && !from_environment.empty()) {
      std::fprintf(stderr, "(serve options read from the environment: %s)\n",
                   absl::StrJoin(from_environment, ", ").c_str());
    }
    return 2;  // every usage error
  }

  if (*serve_command) {
    grpc.idle_timeout = std::chrono::milliseconds(grpc_idle_timeout_ms);
    grpc.keepalive_interval = std::chrono::milliseconds(grpc_keepalive_interval_ms);
    grpc.keepalive_timeout = std::chrono::milliseconds(grpc_keepalive_timeout_ms);
    // Checked by IsMember above.
    serve.ratelimit_headers = tollgate::server::ParseRateLimitHeaderFormat(ratelimit_headers)
                                  .value_or(tollgate::server::RateLimitHeaderFormat::kDraft11);
    if (!tracing_endpoint.empty()) {
      tracing.enabled = true;
      tracing.endpoint = tracing_endpoint;
    }
    spdlog::set_level(spdlog::level::from_str(log_level));
    for (const std::string& warning :
         tollgate::cli::MisspelledEnvironmentVariables(*serve_command)) {
      spdlog::warn("{}", warning);
    }
    if (tollgate::cli::HideRedisPasswords(argc, argv)) {
      spdlog::warn(
          "--redis on the command line carries a password, which every local user can read "
          "(ps, /proc/PID/cmdline) until it is hidden after start; give it as TOLLGATE_REDIS or "
          "with --redis-password-file");
    }
    return tollgate::cli::RunServe(serve);
  }
  if (*validate_command) return tollgate::cli::RunValidate(validate_paths);
  if (*check_command) return tollgate::cli::RunCheck(check);
  return 2;
}
