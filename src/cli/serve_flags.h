// Copyright tollgate authors. `tollgate serve`'s command line: every option, its help, its
// environment variable (TOLLGATE_<NAME>), and the conversion of what was given into
// ServeOptions.
//
//   ServeFlags flags;                                  // defaults: ServeOptions'
//   CLI::App* serve = AddServeCommand(app, flags);
//   app.parse(argc, argv);
//   if (*serve) { absl::Status done = FinishServeFlags(flags); ... RunServe(flags.options); }
#ifndef TOLLGATE_SRC_CLI_SERVE_FLAGS_H_
#define TOLLGATE_SRC_CLI_SERVE_FLAGS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "src/cli/serve.h"

namespace CLI {
class App;
}  // namespace CLI

namespace tollgate::cli {

// What the options write to: ServeOptions, and the values that need a conversion first.
// Set the fields before AddServeCommand to change the defaults `--help` shows.
struct ServeFlags {
  ServeOptions options;
  std::string log_level = "info";
  std::string log_format = "text";
  // --env: whose environment gives the defaults ("" or kRatelimitEnvironmentName).
  std::string env;
  std::string ratelimit_headers = "draft11";
  std::string default_algorithm = "fixed_window";
  // --tracing-endpoint: given, it turns tracing on (options.tracing).
  std::string tracing_endpoint;
  int64_t grpc_idle_timeout_ms = options.grpc.idle_timeout.count();
  int64_t grpc_keepalive_interval_ms = options.grpc.keepalive_interval.count();
  int64_t grpc_keepalive_timeout_ms = options.grpc.keepalive_timeout.count();
};

// Adds the `serve` subcommand to `app`, its options writing into `flags` (which must outlive
// the parse), each also read from TOLLGATE_<NAME> (serve_environment.h).
CLI::App* AddServeCommand(CLI::App& app, ServeFlags& flags);

// After a successful parse: converts the values kept as text or milliseconds into
// flags.options. InvalidArgument, naming the option, for a combination that cannot be
// served (no config at all).
absl::Status FinishServeFlags(ServeFlags& flags);

// The value of `--env` (or `--env=`) among the arguments, else of TOLLGATE_ENV; nullopt when
// neither is given. Read before the parse, because the environment it names gives the
// defaults the parse starts from.
std::optional<std::string> FindEnvFlag(int argc, char** argv);

}  // namespace tollgate::cli

#endif  // TOLLGATE_SRC_CLI_SERVE_FLAGS_H_
