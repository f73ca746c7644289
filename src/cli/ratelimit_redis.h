// Copyright tollgate authors. envoyproxy/ratelimit's REDIS_* variables, as one Redis URL.
#ifndef TOLLGATE_SRC_CLI_RATELIMIT_REDIS_H_
#define TOLLGATE_SRC_CLI_RATELIMIT_REDIS_H_

#include "src/cli/environment_reader.h"
#include "src/cli/serve.h"

namespace tollgate::cli {

// REDIS_URL with REDIS_TYPE (single, cluster, sentinel), REDIS_TLS and its files, REDIS_AUTH
// and the startup retries into `options` (redis_url, ...); the peer's variables tollgate has
// no use for are notices, and what it cannot serve (a Unix socket, sentinels with a password)
// errors.
void ReadRedisVariables(EnvironmentReader& env, ServeOptions& options);

}  // namespace tollgate::cli

#endif  // TOLLGATE_SRC_CLI_RATELIMIT_REDIS_H_
