// Copyright tollgate authors. `redis://[user:password@]host:port[/db]` URLs.
#ifndef TOLLGATE_SRC_STORE_REDIS_REDIS_URL_H_
#define TOLLGATE_SRC_STORE_REDIS_REDIS_URL_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tollgate::redis {

struct RedisUrl {
  std::string host;
  int port = 6379;
  // Empty user with a password: `AUTH password` (the default user). Both: ACL `AUTH user
  // password`. Neither: no AUTH.
  std::string user;
  std::string password;
  int db = 0;
};

// Parses `redis://[[user]:password@]host[:port][/db]`. An IPv6 host is written in brackets
// (`redis://[::1]:6379`). User and password may be percent-encoded. InvalidArgument naming
// the offending part otherwise (the password is never echoed).
absl::StatusOr<RedisUrl> ParseRedisUrl(std::string_view url);

}  // namespace tollgate::redis

#endif  // TOLLGATE_SRC_STORE_REDIS_REDIS_URL_H_
