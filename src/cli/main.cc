// Copyright tollgate authors. The one binary: `tollgate serve | validate | check`.
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
                            "Redis URL (redis://HOST:PORT); without it, state is in memory");
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
    spdlog::set_level(spdlog::level::from_str(log_level));
    return tollgate::cli::RunServe(serve);
  }
  if (*validate_command) return tollgate::cli::RunValidate(validate_paths);
  if (*check_command) return tollgate::cli::RunCheck(check);
  return 2;
}
