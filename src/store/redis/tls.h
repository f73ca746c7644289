// Copyright tollgate authors. TLS settings for connections to Redis (rediss://).
#ifndef TOLLGATE_SRC_STORE_REDIS_TLS_H_
#define TOLLGATE_SRC_STORE_REDIS_TLS_H_

#include <boost/asio/ssl/context.hpp>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace tollgate::redis {

struct TlsOptions {
  // PEM file of the certificate authorities that sign Redis' certificate. Empty: the
  // system's default trust store.
  std::string ca_file;
  // Client certificate and private key (PEM), for a Redis that requires them
  // (`tls-auth-clients yes`, Redis' default). Both or neither.
  std::string cert_file;
  std::string key_file;
  // Verify Redis' certificate chain and that it names the host of the URL. Turn off only
  // for tests against a self-signed certificate with no CA at hand.
  bool verify_peer = true;
};

// A client TLS context (TLS 1.2 or later) built from `options`. InvalidArgument naming the
// file when a CA, certificate or key cannot be loaded, or when only one of cert/key is set.
absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> MakeTlsContext(
    const TlsOptions& options);

}  // namespace tollgate::redis

#endif  // TOLLGATE_SRC_STORE_REDIS_TLS_H_
