// Copyright tollgate authors. TLS and mTLS on `tollgate serve`'s gRPC port, end to end: a
// real process with certificates this test makes, grpc++ clients (the stubs Envoy's API
// generates) and an OpenSSL client (tests/support/tls_client.h) that reports what it sees.
#include <openssl/ssl.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/grpc_tls_clients.h"
#include "tests/support/process.h"
#include "tests/support/serve_process.h"
#include "tests/support/tls_certificates.h"
#include "tests/support/tls_client.h"

namespace tollgate {
namespace {

using ::envoy::service::ratelimit::v3::RateLimitResponse;
using testing::GrpcTlsChannel;
using testing::GrpcTlsFlags;
using ::testing::HasSubstr;
using testing::MetricValue;
using ::testing::Not;
using testing::ProbeTls;
using testing::ServeProcess;
using testing::ShouldRateLimit;
using testing::TlsClientOptions;

constexpr char kFailed[] = "tollgate_grpc_tls_handshake_failures_total{reason=\"failed\"}";

class GrpcTlsTest : public testing::CertificatesTest<&testing::MakeGrpcTlsCertificates> {
 protected:
  // mTLS: the server certificate, client certificates of ca() required.
  static std::unique_ptr<ServeProcess> StartMtls(std::vector<std::string> extra = {}) {
    std::vector<std::string> flags =
        GrpcTlsFlags(certs().server_cert(), certs().server_key(), certs().ca());
    flags.insert(flags.end(), extra.begin(), extra.end());
    return ServeProcess::Start(testing::kGrpcTlsConfig, flags);
  }

  // What an OpenSSL client presenting `cert` (a name AddCertificate knows, or "" for none) sees.
  static testing::TlsProbe Probe(const ServeProcess& server, const std::string& cert) {
    TlsClientOptions options;
    options.ca_path = certs().ca();
    if (!cert.empty()) {
      options.cert_path = certs().Pem(cert);
      options.key_path = certs().Key(cert);
    }
    return ProbeTls(server.grpc_port(), options);
  }
};

TEST_F(GrpcTlsTest, ShouldRateLimitOverMtlsIsOkThenOverLimit) {
  auto server = StartMtls();
  ASSERT_NE(server, nullptr);
  EXPECT_THAT(server->log(), HasSubstr("grpc tls: on (client certificates required)"));
  auto channel = GrpcTlsChannel(server->grpc_port(), certs().ca(), certs().client_cert(),
                                certs().client_key());
  for (uint32_t remaining : {2u, 1u, 0u}) {
    RateLimitResponse response;
    grpc::Status status = ShouldRateLimit(channel, "alice", &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.overall_code(), RateLimitResponse::OK);
    EXPECT_EQ(response.statuses(0).limit_remaining(), remaining);
  }
  RateLimitResponse refused;
  ASSERT_TRUE(ShouldRateLimit(channel, "alice", &refused).ok());
  EXPECT_EQ(refused.overall_code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(MetricValue(*server, "tollgate_grpc_tls_handshakes_total"), 1);
  EXPECT_EQ(server->Stop(), 0);
}

TEST_F(GrpcTlsTest, RefusesClientsWithoutACertificateOfTheClientCa) {
  // Every failure logged (a warning at most once a second, the rest at debug level).
  auto server = StartMtls({"--log-level", "debug"});
  ASSERT_NE(server, nullptr);
  RateLimitResponse response;
  // No certificate; one of another CA: refused by the server.
  for (const auto& channel :
       {GrpcTlsChannel(server->grpc_port(), certs().ca()),
        GrpcTlsChannel(server->grpc_port(), certs().ca(), certs().Pem("other_client"),
                       certs().Key("other_client"))}) {
    grpc::Status status = ShouldRateLimit(channel, "bob", &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  }
  EXPECT_FALSE(Probe(*server, "").served);
  EXPECT_FALSE(Probe(*server, "other_client").served);
  EXPECT_TRUE(Probe(*server, "client").served);
  EXPECT_GE(MetricValue(*server, kFailed), 4);
  EXPECT_THAT(server->log(), HasSubstr("peer did not return a certificate"));
  EXPECT_THAT(server->log(), HasSubstr("the client certificate: unable to get local issuer"));
}

TEST_F(GrpcTlsTest, AClientTrustingAnotherCaRefusesTheServer) {
  auto server = StartMtls();
  ASSERT_NE(server, nullptr);
  auto channel = GrpcTlsChannel(server->grpc_port(), certs().other_ca(), certs().client_cert(),
                                certs().client_key());
  RateLimitResponse response;
  EXPECT_EQ(ShouldRateLimit(channel, "carol", &response).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  TlsClientOptions options;
  options.ca_path = certs().other_ca();
  EXPECT_FALSE(ProbeTls(server->grpc_port(), options).handshake);
}

TEST_F(GrpcTlsTest, PlaintextToTheTlsPortFailsAndTheServerKeepsServing) {
  auto server = StartMtls();
  ASSERT_NE(server, nullptr);
  RateLimitResponse response;
  grpc::Status plain =
      ShouldRateLimit(GrpcTlsChannel(server->grpc_port(), /*ca_path=*/""), "dan", &response);
  EXPECT_EQ(plain.error_code(), grpc::StatusCode::UNAVAILABLE) << plain.error_message();
  auto channel = GrpcTlsChannel(server->grpc_port(), certs().ca(), certs().client_cert(),
                                certs().client_key());
  ASSERT_TRUE(ShouldRateLimit(channel, "dan", &response).ok());
  EXPECT_EQ(response.overall_code(), RateLimitResponse::OK);
  EXPECT_GE(MetricValue(*server, kFailed), 1);
  EXPECT_EQ(server->Stop(), 0);
}

TEST_F(GrpcTlsTest, WithoutAClientCaNoClientCertificateIsNeededAndEnvironmentWorks) {
  // The flags from the environment, as a Kubernetes pod spec gives them.
  auto server = ServeProcess::Start(testing::kGrpcTlsConfig, {},
                                    {"TOLLGATE_GRPC_TLS_CERT=" + certs().server_cert(),
                                     "TOLLGATE_GRPC_TLS_KEY=" + certs().server_key()});
  ASSERT_NE(server, nullptr);
  EXPECT_THAT(server->log(), HasSubstr("grpc tls: on (client certificates not required)"));
  RateLimitResponse response;
  grpc::Status status =
      ShouldRateLimit(GrpcTlsChannel(server->grpc_port(), certs().ca()), "erin", &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.overall_code(), RateLimitResponse::OK);
  EXPECT_TRUE(Probe(*server, "").served);
}

TEST_F(GrpcTlsTest, TheClientSanMustBeOnTheCertificateAsDnsOrUri) {
  for (const std::string san :
       {"envoy.tollgate.test", "ENVOY.tollgate.test", "spiffe://tollgate.test/envoy"}) {
    auto server = StartMtls({"--grpc-tls-client-san", san});
    ASSERT_NE(server, nullptr);
    EXPECT_FALSE(Probe(*server, "client").served) << san;  // the CA's, without the SAN
    EXPECT_TRUE(Probe(*server, "san_client").served) << san;
    RateLimitResponse response;
    EXPECT_TRUE(
        ShouldRateLimit(GrpcTlsChannel(server->grpc_port(), certs().ca(), certs().Pem("san_client"),
                                       certs().Key("san_client")),
                        "fay", &response)
            .ok());
    EXPECT_THAT(server->log(), HasSubstr("does not carry the SAN " + san));
  }
  auto server = StartMtls({"--grpc-tls-client-san", "spiffe://tollgate.test/ENVOY"});
  ASSERT_NE(server, nullptr);
  EXPECT_FALSE(Probe(*server, "san_client").served);  // a URI is compared exactly
}

TEST_F(GrpcTlsTest, AlpnIsH2OnlyAndTls12IsTheOldestVersion) {
  auto server = StartMtls();
  ASSERT_NE(server, nullptr);
  TlsClientOptions options;
  options.ca_path = certs().ca();
  options.cert_path = certs().client_cert();
  options.key_path = certs().client_key();

  options.alpn = {"http/1.1", "h2"};
  testing::TlsProbe both = ProbeTls(server->grpc_port(), options);
  EXPECT_TRUE(both.served) << both.error;
  EXPECT_EQ(both.alpn, "h2");
  EXPECT_EQ(both.subject, "CN=localhost");
  EXPECT_EQ(both.serial, testing::CertificateSerial(certs().server_cert()));

  options.alpn = {};  // no ALPN: served HTTP/2 all the same, as gRPC servers do
  testing::TlsProbe none = ProbeTls(server->grpc_port(), options);
  EXPECT_TRUE(none.served) << none.error;
  EXPECT_EQ(none.alpn, "");

  options.alpn = {"http/1.1"};
  testing::TlsProbe http1 = ProbeTls(server->grpc_port(), options);
  EXPECT_FALSE(http1.handshake);
  EXPECT_THAT(http1.error, HasSubstr("no application protocol"));

  options.alpn = {"h2"};
  options.max_version = TLS1_2_VERSION;
  EXPECT_TRUE(ProbeTls(server->grpc_port(), options).served);
  options.max_version = TLS1_1_VERSION;
  EXPECT_FALSE(ProbeTls(server->grpc_port(), options).handshake);
}

// Runs serve with `flags` (and a config), expecting it to exit before it listens.
struct Refused {
  int code = 0;
  std::string log;
};
Refused RunRefused(const std::vector<std::string>& flags) {
  const std::string dir = testing::MakeTempDir("tollgate-tls-refused");
  testing::WriteFile(dir + "/limits.yaml", testing::kGrpcTlsConfig);
  std::vector<std::string> argv = {TOLLGATE_BINARY, "serve",       "--config", dir + "/limits.yaml",
                                   "--http",        "127.0.0.1:0", "--grpc",   "127.0.0.1:0"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  absl::StatusOr<testing::Subprocess> process = testing::Subprocess::Start(argv, dir + "/log");
  EXPECT_TRUE(process.ok()) << process.status();
  if (!process.ok()) return {};
  Refused refused;
  refused.code = process->Wait();
  refused.log = testing::ReadFileText(dir + "/log");
  return refused;
}

TEST_F(GrpcTlsTest, UnusableFlagsAreUsageErrorsAndBadFilesStartUpErrors) {
  const std::string cert = certs().server_cert();
  const std::string key = certs().server_key();
  const std::string ca = certs().ca();
  struct Case {
    std::vector<std::string> flags;
    int code;
    std::string message;
  };
  const Case cases[] = {
      {{"--grpc-tls-cert", cert}, 2, "--grpc-tls-cert needs --grpc-tls-key"},
      {{"--grpc-tls-key", key}, 2, "--grpc-tls-key needs --grpc-tls-cert"},
      {{"--grpc-tls-client-ca", ca}, 2, "--grpc-tls-client-ca needs --grpc-tls-cert"},
      {{"--grpc-tls-cert", cert, "--grpc-tls-key", key, "--grpc-tls-client-san", "x"},
       2,
       "--grpc-tls-client-san needs --grpc-tls-client-ca"},
      {GrpcTlsFlags(certs().dir + "/missing.pem", key), 1,
       "--grpc-tls-cert " + certs().dir + "/missing.pem: cannot read it: No such file"},
      {GrpcTlsFlags(key, key), 1, "--grpc-tls-cert " + key + ": holds no PEM certificate"},
      {GrpcTlsFlags(cert, cert), 1, "--grpc-tls-key " + cert + ": holds no PEM private key"},
      {GrpcTlsFlags(cert, certs().client_key()), 1,
       "--grpc-tls-key " + certs().client_key() + ": does not match the certificate in " + cert},
      {GrpcTlsFlags(cert, key, certs().dir), 1,
       "--grpc-tls-client-ca " + certs().dir + ": cannot read it: Is a directory"},
      {GrpcTlsFlags(cert, key, key), 1, "--grpc-tls-client-ca " + key + ": holds no PEM"},
  };
  // No line of a private key may reach the log.
  const std::string key_line = testing::ReadFileText(certs().client_key()).substr(28, 64);
  for (const Case& c : cases) {
    Refused refused = RunRefused(c.flags);
    EXPECT_EQ(refused.code, c.code) << refused.log;
    EXPECT_THAT(refused.log, HasSubstr(c.message));
    EXPECT_THAT(refused.log, Not(HasSubstr(key_line)));
    EXPECT_THAT(refused.log, Not(HasSubstr("PRIVATE KEY")));
  }
}

}  // namespace
}  // namespace tollgate
