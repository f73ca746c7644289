// Copyright tollgate authors.
#include "src/server/grpc_tls.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/process.h"
#include "tests/support/serve_process.h"
#include "tests/support/tls_certificates.h"

namespace tollgate::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Optional;

TEST(FindH2InAlpnListTest, FindsH2AmongTheOfferedProtocols) {
  using namespace std::string_view_literals;
  EXPECT_THAT(FindH2InAlpnList("\x02h2"sv), Optional(0u));
  EXPECT_THAT(FindH2InAlpnList("\x08http/1.1\x02h2"sv), Optional(9u));
  EXPECT_EQ(FindH2InAlpnList("\x08http/1.1"sv), std::nullopt);
  EXPECT_EQ(FindH2InAlpnList("\x03h2c"sv), std::nullopt);
  EXPECT_EQ(FindH2InAlpnList(""sv), std::nullopt);
  // Malformed lists: a length past the end, a zero length.
  EXPECT_EQ(FindH2InAlpnList("\x05h2"sv), std::nullopt);
  EXPECT_EQ(FindH2InAlpnList("\x00\x02h2"sv), std::nullopt);
}

using GrpcTlsTest = testing::CertificatesTest<>;

TEST_F(GrpcTlsTest, SansAreMatchedAsDnsIgnoringCaseOrAsUri) {
  const std::string server = testing::ReadFileText(certs().server_cert());
  EXPECT_TRUE(PemCertificateHasSan(server, "localhost"));
  EXPECT_TRUE(PemCertificateHasSan(server, "LocalHost"));
  EXPECT_FALSE(PemCertificateHasSan(server, "localhost.example"));
  // An IP address SAN is neither.
  EXPECT_FALSE(PemCertificateHasSan(testing::ReadFileText(certs().node_cert()), "127.0.0.1"));
  EXPECT_FALSE(PemCertificateHasSan(testing::ReadFileText(certs().client_cert()), "localhost"));
  EXPECT_FALSE(PemCertificateHasSan("not a certificate", "localhost"));
}

TEST_F(GrpcTlsTest, FilesThatDoNotGoTogetherAreInvalidArguments) {
  const GrpcTlsFiles cases[] = {
      {.cert_path = certs().server_cert()},
      {.key_path = certs().server_key()},
      {.client_ca_path = certs().ca()},
      {.client_san = "envoy"},
      {.cert_path = certs().server_cert(), .key_path = certs().server_key(), .client_san = "x"},
  };
  for (const GrpcTlsFiles& files : cases) {
    absl::StatusOr<std::shared_ptr<GrpcTls>> tls = GrpcTls::Create(files);
    EXPECT_EQ(tls.status().code(), absl::StatusCode::kInvalidArgument) << tls.status();
    EXPECT_THAT(std::string(tls.status().message()), HasSubstr("--grpc-tls-"));
  }
}

TEST_F(GrpcTlsTest, BadFilesAreFailedPreconditionsNamingFlagAndFile) {
  const std::string cert = certs().server_cert();
  const std::string key = certs().server_key();
  struct Case {
    GrpcTlsFiles files;
    std::string message;
  };
  const Case cases[] = {
      {{.cert_path = cert + ".missing", .key_path = key},
       "--grpc-tls-cert " + cert + ".missing: cannot read it"},
      {{.cert_path = key, .key_path = key},
       "--grpc-tls-cert " + key + ": holds no PEM certificate"},
      {{.cert_path = cert, .key_path = cert},
       "--grpc-tls-key " + cert + ": holds no PEM private key"},
      {{.cert_path = cert, .key_path = certs().client_key()}, "does not match the certificate in"},
      {{.cert_path = cert, .key_path = key, .client_ca_path = key},
       "--grpc-tls-client-ca " + key + ": holds no PEM certificate"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::shared_ptr<GrpcTls>> tls = GrpcTls::Create(c.files);
    EXPECT_EQ(tls.status().code(), absl::StatusCode::kFailedPrecondition) << tls.status();
    EXPECT_THAT(std::string(tls.status().message()), HasSubstr(c.message));
  }
}

TEST_F(GrpcTlsTest, AFailedReloadKeepsTheContextAndAGoodOneReplacesIt) {
  const std::string dir = testing::MakeTempDir("tollgate-grpc-tls");
  const GrpcTlsFiles files = {
      .cert_path = dir + "/tls.crt", .key_path = dir + "/tls.key", .client_ca_path = certs().ca()};
  testing::WriteFile(files.cert_path, testing::ReadFileText(certs().server_cert()));
  testing::WriteFile(files.key_path, testing::ReadFileText(certs().server_key()));
  absl::StatusOr<std::shared_ptr<GrpcTls>> made = GrpcTls::Create(files);
  ASSERT_TRUE(made.ok()) << made.status();
  GrpcTls& tls = **made;
  EXPECT_TRUE(tls.client_certificates_required());
  const std::shared_ptr<boost::asio::ssl::context> first = tls.context();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(tls.ReloadIfChanged(), std::nullopt);

  testing::WriteFile(files.cert_path, "garbage\n");
  std::optional<absl::Status> refused = tls.ReloadIfChanged();
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(tls.context(), first);
  EXPECT_EQ(tls.ReloadIfChanged(), std::nullopt);  // the refused contents are remembered
  EXPECT_EQ(tls.counters().reloads_failed.load(), 1);

  testing::WriteFile(files.cert_path, testing::ReadFileText(certs().server_cert()));
  std::optional<absl::Status> taken = tls.ReloadIfChanged();
  ASSERT_TRUE(taken.has_value());
  EXPECT_TRUE(taken->ok()) << *taken;
  EXPECT_NE(tls.context(), first);
  EXPECT_TRUE(tls.Reload("a test").ok());  // a reload without a change builds anew too
  EXPECT_EQ(tls.counters().reloads_succeeded.load(), 2);
  EXPECT_EQ(tls.counters().reloads_failed.load(), 1);
}

}  // namespace
}  // namespace tollgate::server
