// Copyright tollgate authors. The one binary: `tollgate serve | validate | check`.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "src/cli/check.h"
#include "src/cli/json_log_formatter.h"
#include "src/cli/ratelimit_environment.h"
#include "src/cli/serve.h"
#include "src/cli/serve_environment.h"
#include "src/cli/serve_flags.h"
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

  tollgate::cli::ServeFlags serve_flags;
  // The binary called as envoyproxy/ratelimit (Envoy Gateway's /bin/ratelimit, no arguments):
  // `tollgate serve --env envoy-ratelimit` with the arguments given.
  std::vector<char*> arguments(argv, argv + argc);
  std::string serve_word = "serve", env_flag = "--env",
              env_name(tollgate::cli::kRatelimitEnvironmentName);
  if (argc >= 1 && tollgate::cli::CalledAsRatelimit(argv[0])) {
    arguments.insert(arguments.begin() + 1, {serve_word.data(), env_flag.data(), env_name.data()});
  }
  // Another service's environment gives the defaults the command line then overrides.
  const std::optional<std::string> env =
      tollgate::cli::FindEnvFlag(static_cast<int>(arguments.size()), arguments.data());
  std::vector<std::string> env_notices;
  if (env.has_value() && *env == tollgate::cli::kRatelimitEnvironmentName) {
    absl::StatusOr<tollgate::cli::RatelimitEnvironment> peer =
        tollgate::cli::ReadRatelimitEnvironment(tollgate::cli::ProcessEnvironment());
    const bool help = std::any_of(arguments.begin() + 1, arguments.end(), [](const char* arg) {
      return std::strcmp(arg, "--help") == 0 || std::strcmp(arg, "-h") == 0;
    });
    if (peer.ok()) {
      serve_flags.options = std::move(peer->options);
      serve_flags.log_level = peer->log_level;
      serve_flags.log_format = peer->json_logs ? "json" : "text";
      env_notices = std::move(peer->notices);
    } else if (!help) {  // --help is shown whatever the environment holds
      for (absl::string_view line : absl::StrSplit(peer.status().message(), '\n')) {
        spdlog::error("envoyproxy/ratelimit's environment: {}", std::string(line));
      }
      return 2;
    }
  }
  CLI::App* serve_command = tollgate::cli::AddServeCommand(app, serve_flags);

  std::vector<std::string> validate_paths;
  CLI::App* validate_command = app.add_subcommand("validate", "Check config files and exit");
  validate_command->add_option("--config", validate_paths, "Config file (YAML); repeatable")
      ->required();
  std::vector<std::string> validate_buckets;
  validate_command->add_option("--rlqs-bucket", validate_buckets,
                               "Print what a Rate Limit Quota Service bucket counts against: "
                               "DOMAIN:key=value[,key=value...]; repeatable");

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
    app.parse(static_cast<int>(arguments.size()), arguments.data());
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
    if (absl::Status finished = tollgate::cli::FinishServeFlags(serve_flags); !finished.ok()) {
      std::fprintf(stderr, "%s\n", std::string(finished.message()).c_str());
      return 2;
    }
    spdlog::set_level(spdlog::level::from_str(serve_flags.log_level));
    if (serve_flags.log_format == "json") {
      spdlog::default_logger()->set_formatter(std::make_unique<tollgate::cli::JsonLogFormatter>());
    }
    for (const std::string& notice : env_notices) spdlog::warn("{}", notice);
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
    return tollgate::cli::RunServe(serve_flags.options);
  }
  if (*validate_command) return tollgate::cli::RunValidate(validate_paths, validate_buckets);
  if (*check_command) return tollgate::cli::RunCheck(check);
  return 2;
}
