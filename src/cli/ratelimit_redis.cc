// Copyright tollgate authors. envoyproxy/ratelimit's REDIS_* variables.
#include "src/cli/ratelimit_redis.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "src/cli/serve_environment.h"

namespace tollgate::cli {
namespace {

// The query of a rediss:// URL for the REDIS_TLS_* files.
std::string RedisTlsQuery(EnvironmentReader& env) {
  std::vector<std::string> parameters;
  if (auto ca = env.Get("REDIS_TLS_CACERT")) parameters.push_back(absl::StrCat("ca=", *ca));
  auto cert = env.Get("REDIS_TLS_CLIENT_CERT");
  auto key = env.Get("REDIS_TLS_CLIENT_KEY");
  if (cert.has_value() != key.has_value()) {
    env.Error(cert ? "REDIS_TLS_CLIENT_KEY" : "REDIS_TLS_CLIENT_CERT",
              "a client certificate needs its key, and a key its certificate");
  } else if (cert) {
    parameters.push_back(absl::StrCat("cert=", *cert));
    parameters.push_back(absl::StrCat("key=", *key));
  }
  if (env.Bool("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false)) {
    parameters.push_back("verify=chain");
  }
  return parameters.empty() ? "" : absl::StrCat("?", absl::StrJoin(parameters, "&"));
}

// REDIS_AUTH's "password" or "user:password" as a URL's credentials ("user:password@").
std::string Credentials(std::string_view auth) {
  if (auth.empty()) return "";
  const size_t colon = auth.find(':');
  if (colon == std::string_view::npos) return absl::StrCat(":", PercentEncode(auth), "@");
  return absl::StrCat(PercentEncode(auth.substr(0, colon)), ":",
                      PercentEncode(auth.substr(colon + 1)), "@");
}
}  // namespace

void ReadRedisVariables(EnvironmentReader& env, ServeOptions& options) {
  if (env.Bool("REDIS_PERSECOND", false)) {
    env.notices().push_back(
        "REDIS_PERSECOND is not used by tollgate: per-second limits are kept in the same Redis "
        "as the others (one atomic step each, so a second Redis buys no accuracy)");
  }
  for (std::string_view name :
       {"REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_URL",
        "REDIS_PERSECOND_POOL_SIZE", "REDIS_PERSECOND_AUTH", "REDIS_PERSECOND_TLS",
        "REDIS_PERSECOND_SENTINEL_AUTH", "REDIS_PERSECOND_PIPELINE_WINDOW",
        "REDIS_PERSECOND_PIPELINE_LIMIT", "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
        "REDIS_PERSECOND_TIMEOUT", "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR"}) {
    env.NotUsed(name, "per-second limits are kept in the same Redis as the others");
  }
  const char* kPipelining =
      "tollgate's connections pipeline every request on their own "
      "(auto-pipelining), with one connection per I/O thread";
  for (std::string_view name :
       {"REDIS_POOL_SIZE", "REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT",
        "REDIS_CLUSTER_PIPELINE_PARALLELISM", "REDIS_POOL_ON_EMPTY_BEHAVIOR"}) {
    env.NotUsed(name, kPipelining);
  }
  env.NotUsed("REDIS_TIMEOUT",
              "each limit has its own deadline for Redis (`timeout`, 10ms by default), and what "
              "happens past it is the limit's `on_store_failure`");
  options.health_requires_redis = env.Bool("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", false);
  // The peer retries the first connection (1 s, doubling to 30 s) for
  // REDIS_STARTUP_MAX_ELAPSED_TIME, 0 meaning for ever.
  const int64_t max_elapsed_ms = env.DurationMs("REDIS_STARTUP_MAX_ELAPSED_TIME", 0);
  options.redis_startup_wait_ms = max_elapsed_ms == 0 ? -1 : max_elapsed_ms;
  options.redis_startup_retry_initial_ms = env.DurationMs("REDIS_STARTUP_INITIAL_INTERVAL", 1'000);
  options.redis_startup_retry_max_ms = env.DurationMs("REDIS_STARTUP_MAX_INTERVAL", 30'000);

  if (env.Get("REDIS_SENTINEL_AUTH")) {
    env.Error("REDIS_SENTINEL_AUTH",
              "sentinels with a password are not supported (tollgate asks sentinels without "
              "AUTH)");
  }
  const std::string socket_type = absl::AsciiStrToLower(env.String("REDIS_SOCKET_TYPE", "unix"));
  std::optional<std::string> url = env.Get("REDIS_URL");
  if (socket_type != "tcp") {
    env.Error("REDIS_SOCKET_TYPE",
              socket_type == "unix"
                  ? "Redis over a Unix socket (the peer's default) is not supported: set "
                    "REDIS_SOCKET_TYPE=tcp and REDIS_URL=host:port"
                  : "expected tcp");
    return;
  }
  if (!url) {
    env.Error("REDIS_URL",
              "not set: expected host:port (REDIS_TYPE=single), "
              "host:port,host:port (cluster) or master,host:port,... (sentinel)");
    return;
  }
  const bool tls = env.Bool("REDIS_TLS", false);
  const std::string query = tls ? RedisTlsQuery(env) : "";
  const std::string credentials = Credentials(env.String("REDIS_AUTH", ""));
  const std::string type = absl::AsciiStrToLower(env.String("REDIS_TYPE", "single"));
  const std::string scheme_tls = tls ? "s" : "";
  if (type == "single" &&
      (absl::StartsWith(*url, "redis://") || absl::StartsWith(*url, "rediss://"))) {
    // A Redis URL (radix, the peer's client, dials those too): taken as it is.
    if (tls || !credentials.empty()) {
      env.Error("REDIS_URL",
                "a redis:// URL carries its own TLS and credentials: give them in "
                "the URL, or give host:port with REDIS_TLS and REDIS_AUTH");
      return;
    }
    options.redis_url = *url;
  } else if (type == "single") {
    if (absl::StrContains(*url, ',')) {
      env.Error("REDIS_URL", "one host:port for REDIS_TYPE=single (several: set REDIS_TYPE)");
      return;
    }
    options.redis_url = absl::StrCat("redis", scheme_tls, "://", credentials, *url, query);
  } else if (type == "cluster") {
    options.redis_url = absl::StrCat("redis", scheme_tls, "-cluster://", credentials, *url, query);
  } else if (type == "sentinel") {
    std::vector<std::string> parts = absl::StrSplit(*url, ',');
    if (parts.size() < 2) {
      env.Error("REDIS_URL",
                "REDIS_TYPE=sentinel expects the master's name and the sentinels: "
                "master,host:port[,host:port...]");
      return;
    }
    const std::string master = parts.front();
    parts.erase(parts.begin());
    options.redis_url = absl::StrCat("redis", scheme_tls, "-sentinel://", credentials,
                                     absl::StrJoin(parts, ","), "/", master, query);
  } else {
    env.Error("REDIS_TYPE", "expected single, sentinel or cluster");
  }
}

}  // namespace tollgate::cli
