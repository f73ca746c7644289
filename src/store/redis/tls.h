// Copyright tollgate authors. TLS settings for connections to Redis (rediss://).
#ifndef TOLLGATE_SRC_STORE_REDIS_TLS_H_
#define TOLLGATE_SRC_STORE_REDIS_TLS_H_

#include <boost/asio/ssl/context.hpp>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "src/store/redis/redis_url.h"

namespace tollgate::redis {

// A client TLS context (TLS 1.2 or later) built from `options`. InvalidArgument naming the
// file when a CA, certificate or key cannot be loaded, or when only one of cert/key is set.
absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> MakeTlsContext(
    const TlsOptions& options);

}  // namespace tollgate::redis

#endif  // TOLLGATE_SRC_STORE_REDIS_TLS_H_
