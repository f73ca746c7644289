// Copyright tollgate authors. The gRPC port's certificates replaced while `tollgate serve`
// runs (SIGHUP, or the files changing as Kubernetes rotates a secret), and floods of
// connections that never finish a TLS handshake: a real process, real clients.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
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
using ::testing::HasSubstr;
using testing::MetricValue;
using testing::ServeProcess;
using testing::ShouldRateLimit;
using testing::WaitUntil;

constexpr char kReloadsOk[] = "tollgate_grpc_tls_reloads_total{result=\"success\"}";
constexpr char kReloadsFailed[] = "tollgate_grpc_tls_reloads_total{result=\"failure\"}";
constexpr char kHandshakes[] = "tollgate_grpc_tls_handshakes_total";

// A certificate and key laid out as Kubernetes mounts a secret: tls.crt and tls.key are links
// into `..data`, itself a link to the current version's directory, so that one rename
// replaces both files at once.
class MountedSecret {
 public:
  explicit MountedSecret(std::string dir) : dir_(std::move(dir)) {
    EXPECT_EQ(symlink("..data/tls.crt", cert().c_str()), 0);
    EXPECT_EQ(symlink("..data/tls.key", key().c_str()), 0);
  }
  std::string cert() const { return dir_ + "/tls.crt"; }
  std::string key() const { return dir_ + "/tls.key"; }

  // Makes a new version holding `cert_contents` and `key_contents` the current one.
  void Publish(const std::string& cert_contents, const std::string& key_contents) {
    const std::string version = "v" + std::to_string(++versions_);
    ASSERT_EQ(mkdir((dir_ + "/" + version).c_str(), 0700), 0);
    testing::WriteFile(dir_ + "/" + version + "/tls.crt", cert_contents);
    testing::WriteFile(dir_ + "/" + version + "/tls.key", key_contents);
    const std::string link = dir_ + "/..data_tmp";
    ASSERT_EQ(symlink(version.c_str(), link.c_str()), 0);
    ASSERT_EQ(std::rename(link.c_str(), (dir_ + "/..data").c_str()), 0);
  }

 private:
  const std::string dir_;
  int versions_ = 0;
};

class GrpcTlsReloadTest : public testing::CertificatesTest<&testing::MakeGrpcTlsCertificates> {
 protected:
  // serve with TLS from a mounted secret holding the certificate `name`, client
  // certificates of ca() required.
  void Start(const std::string& name, std::vector<std::string> extra = {}) {
    secret_ = std::make_unique<MountedSecret>(testing::MakeTempDir("tollgate-secret"));
    Publish(name);
    std::vector<std::string> flags =
        testing::GrpcTlsFlags(secret_->cert(), secret_->key(), certs().ca());
    flags.insert(flags.end(), extra.begin(), extra.end());
    server_ = ServeProcess::Start(testing::kGrpcTlsConfig, flags);
    ASSERT_NE(server_, nullptr);
  }
  void Publish(const std::string& name) {
    secret_->Publish(testing::ReadFileText(certs().Pem(name)),
                     testing::ReadFileText(certs().Key(name)));
  }

  // The serial of the certificate a new connection is served, "" when none is.
  std::string ServedSerial() {
    testing::TlsClientOptions options;
    options.ca_path = certs().ca();
    options.cert_path = certs().client_cert();
    options.key_path = certs().client_key();
    testing::TlsProbe probe = testing::ProbeTls(server_->grpc_port(), options);
    return probe.served ? probe.serial : "";
  }
  std::shared_ptr<grpc::Channel> ClientChannel() {
    return GrpcTlsChannel(server_->grpc_port(), certs().ca(), certs().client_cert(),
                          certs().client_key());
  }
  // Whether a call on `channel` is answered OK (a user of its own each time: `user` allows 3).
  bool Answers(const std::shared_ptr<grpc::Channel>& channel) {
    RateLimitResponse response;
    grpc::Status status = ShouldRateLimit(channel, "gus-" + std::to_string(++calls_), &response);
    return status.ok() && response.overall_code() == RateLimitResponse::OK;
  }

  std::unique_ptr<MountedSecret> secret_;
  std::unique_ptr<ServeProcess> server_;
  int calls_ = 0;
};

TEST_F(GrpcTlsReloadTest, SighupServesTheNewCertificateToNewConnectionsOnly) {
  Start("server");
  const std::string first = testing::CertificateSerial(certs().server_cert());
  const std::string second = testing::CertificateSerial(certs().Pem("server2"));
  ASSERT_NE(first, second);
  EXPECT_EQ(ServedSerial(), first);
  auto open = ClientChannel();
  ASSERT_TRUE(Answers(open));

  Publish("server2");
  server_->Signal(SIGHUP);
  ASSERT_TRUE(WaitUntil([&] {
    return server_->log().find("grpc tls: reloaded (SIGHUP)") != std::string::npos;
  })) << server_->log();
  EXPECT_THAT(server_->log(), HasSubstr("certificate CN=localhost-2"));
  EXPECT_EQ(ServedSerial(), second);
  EXPECT_GE(MetricValue(*server_, kReloadsOk), 1);
  EXPECT_EQ(MetricValue(*server_, kReloadsFailed), 0);

  // The connection made before the reload carries on, without a new handshake.
  const int64_t handshakes = MetricValue(*server_, kHandshakes);
  EXPECT_TRUE(Answers(open));
  EXPECT_EQ(MetricValue(*server_, kHandshakes), handshakes);
  EXPECT_EQ(server_->Stop(), 0);
}

TEST_F(GrpcTlsReloadTest, ARotatedSecretIsReloadedWithoutASignal) {
  Start("server");
  Publish("server2");
  const std::string second = testing::CertificateSerial(certs().Pem("server2"));
  EXPECT_TRUE(WaitUntil([&] { return ServedSerial() == second; })) << server_->log();
  EXPECT_THAT(server_->log(), HasSubstr("grpc tls: reloaded (a TLS file changed)"));
  EXPECT_EQ(MetricValue(*server_, kReloadsOk), 1);
}

TEST_F(GrpcTlsReloadTest, ABadReplacementKeepsTheOldCertificateAndCountsAFailure) {
  Start("server");
  const std::string first = testing::CertificateSerial(certs().server_cert());
  auto open = ClientChannel();
  ASSERT_TRUE(Answers(open));

  // Not a certificate; then a certificate with another's key.
  secret_->Publish("not a certificate\n", testing::ReadFileText(certs().server_key()));
  server_->Signal(SIGHUP);
  ASSERT_TRUE(WaitUntil([&] { return MetricValue(*server_, kReloadsFailed) >= 1; }));
  EXPECT_THAT(server_->log(), HasSubstr("the old certificates keep serving: --grpc-tls-cert " +
                                        secret_->cert() + ": holds no PEM certificate"));
  EXPECT_EQ(ServedSerial(), first);
  secret_->Publish(testing::ReadFileText(certs().Pem("server2")),
                   testing::ReadFileText(certs().server_key()));
  ASSERT_TRUE(WaitUntil([&] { return MetricValue(*server_, kReloadsFailed) >= 2; }));
  EXPECT_THAT(server_->log(), HasSubstr("does not match the certificate"));
  EXPECT_EQ(ServedSerial(), first);
  EXPECT_TRUE(Answers(open));
  EXPECT_TRUE(Answers(ClientChannel()));
  EXPECT_EQ(MetricValue(*server_, kReloadsOk), 0);

  // A good one is taken at the next change.
  Publish("server2");
  const std::string second = testing::CertificateSerial(certs().Pem("server2"));
  EXPECT_TRUE(WaitUntil([&] { return ServedSerial() == second; })) << server_->log();
}

// A socket connected to the port that sends `bytes` (maybe none) and then only waits.
int ConnectIdle(int port, const std::string& bytes) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  if (!bytes.empty()) {
    EXPECT_GT(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), 0);
  }
  return fd;
}

// Whether the server closes `fd` within 30 s (end of stream or reset); closes it.
bool ClosedByServer(int fd) {
  timeval bound{};
  bound.tv_sec = 30;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof bound);
  char byte[512];
  ssize_t got = 0;
  do {
    got = recv(fd, byte, sizeof byte, 0);  // a TLS alert may come before the end
  } while (got > 0);
  const bool closed = got == 0 || errno == ECONNRESET;
  close(fd);
  return closed;
}

TEST_F(GrpcTlsReloadTest, AHandshakeFloodIsBoundedAndTheServerKeepsAnswering) {
  constexpr int kCap = 8;
  constexpr int kIdle = 40;
  Start("server", {"--grpc-tls-max-handshakes", std::to_string(kCap),
                   "--grpc-tls-handshake-timeout-ms", "3000"});
  auto open = ClientChannel();
  ASSERT_TRUE(Answers(open));
  const int port = server_->grpc_port();

  // Connections that send nothing: kCap hold the handshakes until the timeout closes them,
  // the rest are closed at once. A connection made before keeps answering meanwhile.
  std::vector<int> idle;
  for (int i = 0; i < kIdle; ++i) idle.push_back(ConnectIdle(port, ""));
  EXPECT_TRUE(WaitUntil([&] {
    return MetricValue(*server_,
                       "tollgate_grpc_tls_handshake_failures_total{reason=\"over_cap\"}") > 0;
  }));
  EXPECT_LE(MetricValue(*server_, "tollgate_grpc_tls_handshakes_in_progress"), kCap);
  EXPECT_TRUE(Answers(open));
  for (int fd : idle) {
    EXPECT_TRUE(ClosedByServer(fd));
  }
  const int64_t over_cap =
      MetricValue(*server_, "tollgate_grpc_tls_handshake_failures_total{reason=\"over_cap\"}");
  const int64_t timed_out =
      MetricValue(*server_, "tollgate_grpc_tls_handshake_failures_total{reason=\"timeout\"}");
  EXPECT_GE(timed_out, 1);
  EXPECT_EQ(over_cap + timed_out, kIdle);

  // Garbage instead of a ClientHello (and h2c's preface): each closed, none held.
  std::vector<int> garbage;
  for (int i = 0; i < kIdle; ++i) {
    garbage.push_back(ConnectIdle(port, i % 2 == 0 ? std::string(1024, static_cast<char>(i))
                                                   : "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"));
  }
  for (int fd : garbage) {
    EXPECT_TRUE(ClosedByServer(fd));
  }
  EXPECT_TRUE(WaitUntil(
      [&] { return MetricValue(*server_, "tollgate_grpc_tls_handshakes_in_progress") == 0; }));
  EXPECT_GE(MetricValue(*server_, "tollgate_grpc_tls_handshake_failures_total{reason=\"failed\"}"),
            1);

  // Then new connections are served again.
  EXPECT_TRUE(Answers(open));
  EXPECT_TRUE(Answers(ClientChannel()));
  EXPECT_FALSE(ServedSerial().empty());
  EXPECT_EQ(server_->Stop(), 0);
}

}  // namespace
}  // namespace tollgate
