// Copyright tollgate authors. What the tests of the gRPC port's TLS share: a `tollgate serve`
// with TLS flags, grpc++ clients with and without certificates, and its /metrics read back.
#ifndef TOLLGATE_TESTS_SUPPORT_GRPC_TLS_CLIENTS_H_
#define TOLLGATE_TESTS_SUPPORT_GRPC_TLS_CLIENTS_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "grpcpp/channel.h"
#include "grpcpp/support/status.h"
#include "tests/support/serve_process.h"
#include "tests/support/tls_certificates.h"

namespace tollgate::testing {

// Envoy's format: `user` allows 3 a minute.
inline constexpr char kGrpcTlsConfig[] = R"(domain: tiffin
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
)";

// A grpc++ channel to 127.0.0.1:`port` with a connection of its own (not shared with other
// channels). `ca_path` empty: plaintext (h2c); else TLS trusting it, verifying the name
// "localhost", presenting `cert_path` and `key_path` when given.
std::shared_ptr<grpc::Channel> GrpcTlsChannel(int port, const std::string& ca_path,
                                              const std::string& cert_path = "",
                                              const std::string& key_path = "");

// ShouldRateLimit for domain tiffin, descriptor (user, `user`), within 10 s.
grpc::Status ShouldRateLimit(const std::shared_ptr<grpc::Channel>& channel, const std::string& user,
                             envoy::service::ratelimit::v3::RateLimitResponse* response);

// The value of the series `series` (such as `x_total{reason="failed"}`) in the server's
// /metrics, or -1 when it is not there or the server does not answer.
int64_t MetricValue(const ServeProcess& server, const std::string& series);

// Polls `condition` every 20 ms until it holds (true) or `timeout` passes (false).
bool WaitUntil(const std::function<bool()>& condition,
               std::chrono::milliseconds timeout = std::chrono::seconds(30));

// The test certificates with those the TLS tests add: `server2` (for localhost, the same CA,
// a key of its own), `other_client` (a client certificate of the other CA), `san_client` (a
// client certificate carrying DNS:envoy.tollgate.test and URI spiffe://tollgate.test/envoy).
absl::StatusOr<TestCertificates> MakeGrpcTlsCertificates();

// serve's flags for TLS with `cert` and `key`, `client_ca` when not empty.
std::vector<std::string> GrpcTlsFlags(const std::string& cert, const std::string& key,
                                      const std::string& client_ca = "");

}  // namespace tollgate::testing

#endif  // TOLLGATE_TESTS_SUPPORT_GRPC_TLS_CLIENTS_H_
