// Copyright tollgate authors. `tollgate serve` in envoyproxy/ratelimit's place: run as
// `ratelimit` (Envoy Gateway's container calls /bin/ratelimit) or as `tollgate serve --env
// envoy-ratelimit`, it reads the peer's environment variables, with the peer's defaults
// (its bind addresses and ports among them), into serve's options. docs/envoy-gateway.md has
// the table of every variable and what tollgate does with it.
//
//   absl::StatusOr<RatelimitEnvironment> peer = ReadRatelimitEnvironment(ProcessEnvironment());
//   ServeOptions options = peer->options;   // then the command line and TOLLGATE_* on top
//   for (const std::string& notice : peer->notices) spdlog::warn("{}", notice);
#ifndef TOLLGATE_SRC_CLI_RATELIMIT_ENVIRONMENT_H_
#define TOLLGATE_SRC_CLI_RATELIMIT_ENVIRONMENT_H_

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "src/cli/serve.h"

namespace tollgate::cli {

// The value of `--env` that selects envoyproxy/ratelimit's environment.
inline constexpr std::string_view kRatelimitEnvironmentName = "envoy-ratelimit";

// Whether the program was called as envoyproxy/ratelimit: the last component of `argv0`
// is `ratelimit`.
bool CalledAsRatelimit(std::string_view argv0);

// An environment variable's value, or nullopt when it is unset. An empty value counts as
// unset (as for tollgate's own TOLLGATE_* variables).
using EnvironmentLookup = std::function<std::optional<std::string>(std::string_view name)>;

// This process's environment.
EnvironmentLookup ProcessEnvironment();

// What the peer's environment says.
struct RatelimitEnvironment {
  // `base` with the peer's settings, and its defaults where a variable is unset.
  ServeOptions options;
  // spdlog's name of LOG_LEVEL (the peer's default: warn).
  std::string log_level = "warn";
  // LOG_FORMAT=json: one JSON object per log line.
  bool json_logs = false;
  // One line per set variable that tollgate does not use, saying why: logged once at start.
  std::vector<std::string> notices;
};

// Reads envoyproxy/ratelimit's variables (settings.go of its July 2026 head) over `base`.
// InvalidArgument listing every variable whose value cannot be used (one per line, each
// naming the variable and what it takes; never a secret's value).
absl::StatusOr<RatelimitEnvironment> ReadRatelimitEnvironment(const EnvironmentLookup& lookup,
                                                              ServeOptions base = {});

}  // namespace tollgate::cli

#endif  // TOLLGATE_SRC_CLI_RATELIMIT_ENVIRONMENT_H_
