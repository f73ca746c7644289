// Copyright tollgate authors. Connections to Redis over TLS (rediss://), against a real
// redis-server with TLS on, and certificates made by the openssl command for the test.
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/store/redis/connection.h"
#include "src/store/redis/tls.h"
#include "tests/support/limits.h"
#include "tests/support/process.h"
#include "tests/support/redis_cluster.h"
#include "tests/support/redis_server.h"
#include "tests/support/redis_stores.h"
#include "tests/support/tls_certificates.h"
#include "tollgate/redis_store.h"

namespace tollgate {
namespace {

using redis::ConnectionOptions;
using redis::RedisConnection;
using redis::RedisReply;
using redis::TlsOptions;
using ::testing::HasSubstr;
using testing::RedisServer;

// One connection on its own io_context thread.
class Connection {
 public:
  Connection(std::string host, int port, std::shared_ptr<boost::asio::ssl::context> tls,
             bool verify_host = true)
      : work_(boost::asio::make_work_guard(io_)) {
    ConnectionOptions options;
    options.url.host = std::move(host);
    options.url.port = port;
    options.url.tls_options.verify_host = verify_host;
    options.connect_timeout = std::chrono::milliseconds(5000);
    options.tls_context = std::move(tls);
    connection_ = std::make_unique<RedisConnection>(io_, options);
    thread_ = std::thread([this] { io_.run(); });
  }
  ~Connection() {
    std::promise<void> stopped;
    boost::asio::post(io_, [this, &stopped] {
      connection_->Shutdown();
      stopped.set_value();
    });
    stopped.get_future().wait();
    work_.reset();
    io_.stop();
    thread_.join();
  }

  // The first attempt's result: OK once connected, authenticated and checked.
  absl::Status Start() {
    std::promise<absl::Status> result;
    connection_->Start([&result](absl::Status status) { result.set_value(std::move(status)); });
    return result.get_future().get();
  }

  absl::StatusOr<RedisReply> Command(const std::vector<std::string>& args) {
    std::promise<absl::StatusOr<RedisReply>> reply;
    connection_->Send(redis::FormatCommand(args),
                      [&reply](absl::StatusOr<RedisReply> r) { reply.set_value(std::move(r)); });
    return reply.get_future().get();
  }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::unique_ptr<RedisConnection> connection_;
  std::thread thread_;
};

class RedisTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<testing::TestCertificates> certificates = testing::TestCertificates::Make();
    ASSERT_TRUE(certificates.ok()) << certificates.status();
    certificates_ = *std::move(certificates);
    tls_port_ = testing::FreePort();
    // The plain port stays on for the fixture's own PING; the test talks TLS only.
    absl::StatusOr<std::unique_ptr<RedisServer>> server = RedisServer::Start(
        {"--tls-port", std::to_string(tls_port_), "--tls-cert-file", certificates_.server_cert(),
         "--tls-key-file", certificates_.server_key(), "--tls-ca-cert-file", certificates_.ca(),
         "--tls-auth-clients", "yes"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    ASSERT_TRUE(testing::WaitForPort(tls_port_, std::chrono::milliseconds(10000)).ok());
  }

  std::shared_ptr<boost::asio::ssl::context> Context(const TlsOptions& options) {
    absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> context =
        redis::MakeTlsContext(options);
    EXPECT_TRUE(context.ok()) << context.status();
    return context.ok() ? *context : nullptr;
  }

  TlsOptions Trusting() {
    return {.ca_file = certificates_.ca(),
            .cert_file = certificates_.client_cert(),
            .key_file = certificates_.client_key()};
  }

  testing::TestCertificates certificates_;
  int tls_port_ = 0;
  std::unique_ptr<RedisServer> server_;
};

TEST_F(RedisTlsTest, VerifiedConnectionRunsCommandsAndScripts) {
  {
    const std::string host = "localhost";
    Connection connection(host, tls_port_, Context(Trusting()));
    ASSERT_TRUE(connection.Start().ok()) << host;
    absl::StatusOr<RedisReply> set = connection.Command({"SET", "k", "v", "PX", "10000"});
    ASSERT_TRUE(set.ok()) << set.status();
    absl::StatusOr<RedisReply> script =
        connection.Command({"EVAL", "return redis.call('GET', KEYS[1])", "1", "k"});
    ASSERT_TRUE(script.ok()) << script.status();
    EXPECT_EQ(script->str, "v") << host;
  }
}

TEST_F(RedisTlsTest, RefusesAServerSignedByAnotherAuthority) {
  TlsOptions options = Trusting();
  options.ca_file = certificates_.other_ca();
  Connection connection("localhost", tls_port_, Context(options));
  absl::Status status = connection.Start();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("TLS handshake"));
  EXPECT_THAT(status.message(), HasSubstr("certificate verify failed"));
}

TEST_F(RedisTlsTest, RefusesACertificateForAnotherHost) {
  // The server's certificate names localhost, not 127.0.0.1: the same server, another name.
  Connection connection("127.0.0.1", tls_port_, Context(Trusting()));
  absl::Status status = connection.Start();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("certificate verify failed"));
}

TEST_F(RedisTlsTest, ChainVerificationAloneAcceptsAnotherHostButNotAnotherAuthority) {
  // verify=chain (envoyproxy/ratelimit's REDIS_TLS_SKIP_HOSTNAME_VERIFICATION): the name
  // is not checked, the chain still is.
  Connection other_name("127.0.0.1", tls_port_, Context(Trusting()), /*verify_host=*/false);
  ASSERT_TRUE(other_name.Start().ok());
  absl::StatusOr<RedisReply> pong = other_name.Command({"PING"});
  ASSERT_TRUE(pong.ok()) << pong.status();
  EXPECT_EQ(pong->str, "PONG");

  TlsOptions options = Trusting();
  options.ca_file = certificates_.other_ca();
  Connection other_authority("127.0.0.1", tls_port_, Context(options), /*verify_host=*/false);
  absl::Status status = other_authority.Start();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("certificate verify failed"));
}

TEST_F(RedisTlsTest, WithoutVerificationASelfSignedServerIsAccepted) {
  Connection connection("127.0.0.1", tls_port_,
                        Context({.cert_file = certificates_.client_cert(),
                                 .key_file = certificates_.client_key(),
                                 .verify_peer = false}));
  ASSERT_TRUE(connection.Start().ok());
  absl::StatusOr<RedisReply> pong = connection.Command({"PING"});
  ASSERT_TRUE(pong.ok()) << pong.status();
  EXPECT_EQ(pong->str, "PONG");
}

TEST_F(RedisTlsTest, ARedisThatRequiresAClientCertificateRefusesNone) {
  Connection connection("localhost", tls_port_, Context({.ca_file = certificates_.ca()}));
  EXPECT_EQ(connection.Start().code(), absl::StatusCode::kUnavailable);
}

TEST_F(RedisTlsTest, PlainTcpToTheTlsPortFailsWithinTheConnectTimeout) {
  Connection connection("127.0.0.1", tls_port_, nullptr);
  EXPECT_EQ(connection.Start().code(), absl::StatusCode::kUnavailable);
}

TEST_F(RedisTlsTest, RedisStoreChecksOverARedissUrl) {
  const std::string url =
      absl::StrCat("rediss://localhost:", tls_port_, "?ca=", certificates_.ca(),
                   "&cert=", certificates_.client_cert(), "&key=", certificates_.client_key());
  absl::StatusOr<std::unique_ptr<RedisStore>> store = testing::ConnectRedisStore({.url = url});
  ASSERT_TRUE(store.ok()) << store.status();
  const Limit limit = testing::TokenBucket("tls", 2, 0.001);
  int allowed = 0;
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<std::vector<Decision>> decisions = (*store)->Apply({{&limit, "user:1", 1}});
    ASSERT_TRUE(decisions.ok()) << decisions.status();
    EXPECT_EQ((*decisions)[0].source, DecisionSource::kRedis);
    allowed += (*decisions)[0].allowed ? 1 : 0;
  }
  EXPECT_EQ(allowed, 2);
}

TEST_F(RedisTlsTest, RedisStoreNamesAnUnreadableCaFile) {
  absl::StatusOr<std::unique_ptr<RedisStore>> store = testing::ConnectRedisStore(
      {.url = absl::StrCat("rediss://localhost:", tls_port_, "?ca=/nonexistent/ca.pem")});
  EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(store.status().message(), HasSubstr("/nonexistent/ca.pem"));
}

// A token bucket of 2 for `keys` keys spread over the cluster's slots: each admits exactly
// 2 through `store`; and a batch over several slots is all or nothing.
void ExpectTwoPerKey(Store& store, int keys) {
  const Limit limit = testing::TokenBucket("tls", 2, 0.001);
  for (int i = 0; i < keys; ++i) {
    const std::string key = absl::StrCat("user:", i);
    int allowed = 0;
    for (int attempt = 0; attempt < 3; ++attempt) {
      absl::StatusOr<std::vector<Decision>> decisions = store.Apply({{&limit, key, 1}});
      ASSERT_TRUE(decisions.ok()) << decisions.status();
      EXPECT_EQ((*decisions)[0].source, DecisionSource::kRedis);
      allowed += (*decisions)[0].allowed ? 1 : 0;
    }
    EXPECT_EQ(allowed, 2) << key;
  }
  absl::StatusOr<std::vector<Decision>> batch =
      store.Apply({{&limit, "batch:a", 1}, {&limit, "batch:b", 2}, {&limit, "user:0", 1}});
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_FALSE((*batch)[2].allowed);  // user:0 is spent, so nothing is consumed
  absl::StatusOr<std::vector<Decision>> peek = store.Apply({{&limit, "batch:b", 0}});
  ASSERT_TRUE(peek.ok()) << peek.status();
  EXPECT_EQ((*peek)[0].remaining, 2);
}

// rediss-cluster://: every node over TLS, found at the TLS port each announces to a TLS
// client; the nodes require a client certificate.
TEST(RedisTlsClusterTest, RedisStoreChecksEverySlotOverTls) {
  absl::StatusOr<testing::TestCertificates> certificates = testing::TestCertificates::Make();
  ASSERT_TRUE(certificates.ok()) << certificates.status();
  auto cluster = testing::RedisCluster::Start(3, 0, &*certificates);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  absl::StatusOr<std::unique_ptr<RedisStore>> store =
      testing::ConnectRedisStore({.url = (*cluster)->tls_url()});
  ASSERT_TRUE(store.ok()) << store.status() << " " << (*cluster)->tls_url();
  ExpectTwoPerKey(**store, 30);

  // Without the client certificate the nodes refuse the connection.
  absl::StatusOr<std::unique_ptr<RedisStore>> anonymous = testing::ConnectRedisStore(
      {.url = absl::StrCat((*cluster)->tls_url().substr(0, (*cluster)->tls_url().find('?')),
                           "?ca=", certificates->ca())});
  EXPECT_FALSE(anonymous.ok());
}

// rediss-sentinel://: the sentinel asked over TLS names the primary by its TLS port, and the
// store reaches it over TLS.
TEST(RedisTlsSentinelTest, RedisStoreFindsThePrimaryOverTls) {
  absl::StatusOr<testing::TestCertificates> certificates = testing::TestCertificates::Make();
  ASSERT_TRUE(certificates.ok()) << certificates.status();
  auto sentinels = testing::RedisSentinelSet::Start("limits", &*certificates);
  ASSERT_TRUE(sentinels.ok()) << sentinels.status();
  absl::StatusOr<std::unique_ptr<RedisStore>> store =
      testing::ConnectRedisStore({.url = (*sentinels)->url()});
  ASSERT_TRUE(store.ok()) << store.status() << " " << (*sentinels)->url();
  ExpectTwoPerKey(**store, 5);
}

TEST(RedisTlsOptionsTest, MissingFilesAreNamed) {
  absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> context =
      redis::MakeTlsContext({.ca_file = "/nonexistent/ca.pem"});
  EXPECT_EQ(context.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(context.status().message(), HasSubstr("/nonexistent/ca.pem"));

  context = redis::MakeTlsContext({.cert_file = "/nonexistent/client.pem"});
  EXPECT_EQ(context.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(context.status().message(), HasSubstr("both"));
}

}  // namespace
}  // namespace tollgate
