// Copyright tollgate authors. `tollgate serve`'s options from the environment, and its
// secrets from files: what keeps the Redis password off the command line, where every local
// user reads it (`ps`, /proc/PID/cmdline).
#ifndef TOLLGATE_SRC_CLI_SERVE_ENVIRONMENT_H_
#define TOLLGATE_SRC_CLI_SERVE_ENVIRONMENT_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace CLI {
class App;
}  // namespace CLI

namespace tollgate::cli {

struct ServeOptions;

// The prefix of the environment variables `serve` reads.
inline constexpr std::string_view kEnvironmentPrefix = "TOLLGATE_";

// The variable an option is read from: kEnvironmentPrefix and the long name in upper case,
// '-' as '_' ("redis-password-file" -> TOLLGATE_REDIS_PASSWORD_FILE).
std::string EnvironmentName(std::string_view long_name);

// Gives every option of `command` that has a long name (all but --help) its environment
// variable (EnvironmentName), which CLI11 lists in --help and reads when the option is not
// on the command line: the command line wins. An empty variable counts as unset. A flag
// takes true/false, 1/0, yes/no, on/off; a repeatable option takes one value.
void ReadOptionsFromEnvironment(CLI::App& command);

// Warnings for the set variables that start with kEnvironmentPrefix, name no option of
// `command` and are close to one that does (a likely typo, such as TOLLGATE_THREAD for
// TOLLGATE_THREADS): "TOLLGATE_X is not an option of serve (did you mean TOLLGATE_Y?)". Names
// only, never values. Variables far from every option (other tools' settings) are ignored.
std::vector<std::string> MisspelledEnvironmentVariables(const CLI::App& command);

// The set variables that name an option of `command` (names only, never values): what a
// usage error reports, since the offending value may come from one of them.
std::vector<std::string> OptionEnvironmentVariablesSet(const CLI::App& command);

// The secret in the file at `path`: its contents without one final "\n" (or "\r\n"), as
// Kubernetes secrets and systemd credentials hold it. InvalidArgument naming `option` and
// `path`, and never the contents, when the file cannot be read, is empty, holds more than
// one line, or is larger than 64 KiB.
absl::StatusOr<std::string> ReadSecretFile(std::string_view option, const std::string& path);

// `url` (any form RedisStoreOptions::url takes) with `password` as the password of its
// credentials, percent-encoded, keeping the user if there is one (`redis://host` ->
// `redis://:PASSWORD@host`, `redis://app@host` -> `redis://app:PASSWORD@host`).
// InvalidArgument when `url` has no scheme or already carries a password (give it in one
// place). Messages never contain the password.
absl::StatusOr<std::string> WithRedisPassword(std::string_view url, std::string_view password);

// The Redis URL `serve` uses: --redis, or the contents of --redis-url-file (both given:
// InvalidArgument), with the password of --redis-password-file if given (which needs one of
// them). Empty when neither is given: the embedded store. Messages never contain a secret.
absl::StatusOr<std::string> ResolveRedisUrl(const ServeOptions& options);

// `text` with every byte but RFC 3986's unreserved ones (letters, digits, - . _ ~) as %XX: a
// user or password as a URL's credentials carry it.
std::string PercentEncode(std::string_view text);

// Whether `url` carries a password (`:password@`).
bool RedisUrlHasPassword(std::string_view url);

// Overwrites with 'x', in place, the password of each `--redis URL` / `--redis=URL` among
// the process's arguments, so that /proc/PID/cmdline and `ps` stop showing it (they show it
// from exec until then). Call after parsing: the parser copied the values. Returns whether
// there was one. Not thread-safe (call from main before threads start).
bool HideRedisPasswords(int argc, char** argv);

}  // namespace tollgate::cli

#endif  // TOLLGATE_SRC_CLI_SERVE_ENVIRONMENT_H_
