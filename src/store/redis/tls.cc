// Copyright tollgate authors.
#include "src/store/redis/tls.h"

#include <openssl/err.h>

#include "absl/strings/str_cat.h"

namespace tollgate::redis {
namespace {

namespace ssl = boost::asio::ssl;

absl::Status LoadError(absl::string_view what, const std::string& file,
                       const boost::system::error_code& error) {
  return absl::InvalidArgumentError(
      absl::StrCat("cannot load the Redis TLS ", what, " ", file, ": ", error.message()));
}

}  // namespace

absl::StatusOr<std::shared_ptr<ssl::context>> MakeTlsContext(const TlsOptions& options) {
  if (options.cert_file.empty() != options.key_file.empty()) {
    return absl::InvalidArgumentError(
        "Redis TLS: a client certificate needs its key, and a key its certificate (give both "
        "or neither)");
  }
  auto context = std::make_shared<ssl::context>(ssl::context::tls_client);
  context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                       ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
  boost::system::error_code error;
  if (options.ca_file.empty()) {
    context->set_default_verify_paths(error);
    if (error) return LoadError("default trust store", "", error);
  } else {
    context->load_verify_file(options.ca_file, error);
    if (error) return LoadError("CA file", options.ca_file, error);
  }
  if (!options.cert_file.empty()) {
    context->use_certificate_chain_file(options.cert_file, error);
    if (error) return LoadError("certificate", options.cert_file, error);
    context->use_private_key_file(options.key_file, ssl::context::pem, error);
    if (error) return LoadError("private key", options.key_file, error);
  }
  context->set_verify_mode(options.verify_peer ? ssl::verify_peer : ssl::verify_none);
  return context;
}

}  // namespace tollgate::redis
