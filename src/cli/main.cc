// Copyright tollgate authors. The one binary: `tollgate serve | validate | check`.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/synchronization/mutex.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "src/cli/check.h"
#include "src/cli/serve.h"
#include "src/cli/validate.h"

int main(int argc, char** argv) {
  // Debian's Abseil is built with deadlock detection on: every Mutex lock would also update a
  // process-wide lock graph under a global lock (about 6% of a check's time).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Logs go to stderr; stdout is for command output (validate, check).
  spdlog::set_default_logger(spdlog::stderr_color_mt("tollgate"));

  CLI::App app("tollgate: a distributed rate limiter", "tollgate");
  app.require_subcommand(1);

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
  serve_command->add_option("--redis", serve.redis_url,
                            "Redis URL: redis://, rediss:// (TLS), redis-cluster://, "
                            "redis-sentinel:// (docs/redis.md); without it, state is in memory");
  serve_command->add_option("--http", serve.http_address, "HTTP listen address HOST:PORT")
      ->capture_default_str();
  serve_command->add_option("--grpc", serve.grpc_address, "gRPC listen address HOST:PORT")
      ->capture_default_str();
  serve_command->add_flag("--shadow-mode", serve.shadow_mode,
                          "Envoy API: count decisions but never answer OVER_LIMIT");
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
  serve_command->add_option("--log-level", log_level, "trace, debug, info, warn, error, off")
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));

  std::vector<std::string> validate_paths;
  CLI::App* validate_command = app.add_subcommand("validate", "Check config files and exit");
  validate_command->add_option("--config", validate_paths, "Config file (YAML); repeatable")
      ->required();

  tollgate::cli::CheckOptions check;
  CLI::App* check_command = app.add_subcommand("check", "Send one check to a running server");
  check_command->add_option("--url", check.url, "Server URL")->capture_default_str();
  check_command->add_option("--limit", check.limit, "Limit name")->required();
  check_command->add_option("--key", check.key, "Key, such as user:42")->required();
  check_command->add_option("--cost", check.cost, "Units to consume (0 peeks)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    // Help is a success; every usage error exits 2.
    return code == 0 ? 0 : 2;
  }

  if (*serve_command) {
    grpc.idle_timeout = std::chrono::milliseconds(grpc_idle_timeout_ms);
    grpc.keepalive_interval = std::chrono::milliseconds(grpc_keepalive_interval_ms);
    grpc.keepalive_timeout = std::chrono::milliseconds(grpc_keepalive_timeout_ms);
    spdlog::set_level(spdlog::level::from_str(log_level));
    return tollgate::cli::RunServe(serve);
  }
  if (*validate_command) return tollgate::cli::RunValidate(validate_paths);
  if (*check_command) return tollgate::cli::RunCheck(check);
  return 2;
}
