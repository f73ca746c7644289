// Copyright tollgate authors. The xDS client against a real xDS server (tests/support/
// xds_server.h: go-control-plane's state-of-the-world behaviour over gRPC C++): what it
// subscribes to, ACKs and NACKs as the protocol says, reconnection with the version last
// applied, TLS with a client certificate, and the stop.
#include "src/xds/ads_client.h"

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/server/metrics.h"
#include "src/xds/rate_limit_config.h"
#include "tests/support/tls_certificates.h"
#include "tests/support/xds_server.h"

namespace tollgate::xds {
namespace {

using ::testing::HasSubstr;
using ::tollgate::testing::RateLimitConfigFromText;
using ::tollgate::testing::XdsRecordedRequest;
using ::tollgate::testing::XdsServerOptions;
using ::tollgate::testing::XdsTestServer;

constexpr char kNode[] = "envoy-ratelimit";
constexpr auto kWait = std::chrono::seconds(30);

ratelimit::config::ratelimit::v3::RateLimitConfig Valid(const std::string& domain, int limit) {
  return RateLimitConfigFromText(absl::StrCat(
      R"pb(name: ")pb", domain, R"pb(" domain: ")pb", domain,
      R"pb(" descriptors { key: " user " rate_limit { unit: MINUTE requests_per_unit: )pb", limit,
      " } }"));
}

ratelimit::config::ratelimit::v3::RateLimitConfig Invalid() {
  return RateLimitConfigFromText(R"pb(name: "eg-rl"
                                      domain: "default"
                                      descriptors {
                                        key: "k"
                                        rate_limit { unit: 42 }
                                      })pb");
}

// What the client applied, in order.
class Applied {
 public:
  ApplyDomains Function() {
    return [this](std::vector<EnvoyDomainConfig> domains, const std::string& version) {
      absl::MutexLock lock(&mu_);
      if (!refusal_.empty()) return absl::InvalidArgumentError(refusal_);
      versions_.push_back(version);
      domains_ = std::move(domains);
      return absl::OkStatus();
    };
  }
  void Refuse(std::string why) {
    absl::MutexLock lock(&mu_);
    refusal_ = std::move(why);
  }
  std::vector<std::string> versions() const {
    absl::MutexLock lock(&mu_);
    return versions_;
  }
  std::vector<EnvoyDomainConfig> domains() const {
    absl::MutexLock lock(&mu_);
    return domains_;
  }

 private:
  mutable absl::Mutex mu_;
  std::string refusal_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> versions_ ABSL_GUARDED_BY(mu_);
  std::vector<EnvoyDomainConfig> domains_ ABSL_GUARDED_BY(mu_);
};

class AdsClientTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer({}); }

  void StartServer(XdsServerOptions options) {
    absl::StatusOr<std::unique_ptr<XdsTestServer>> server =
        XdsTestServer::Start(std::move(options));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  XdsClientOptions Options() const {
    XdsClientOptions options;
    options.server_address = server_->address();
    options.node_id = kNode;
    options.backoff_initial_ms = 50;  // short, so reconnections and repeated NACKs are quick
    options.backoff_max_ms = 200;
    return options;
  }

  void StartClient(const XdsClientOptions& options) {
    absl::StatusOr<std::unique_ptr<XdsClient>> client =
        XdsClient::Start(options, applied_.Function(), &metrics_);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  // Replaces the server by one that serves TLS with a certificate for "localhost" and
  // requires client certificates, with snapshot "1". Returns client options that trust it (and
  // present no certificate).
  XdsClientOptions StartMutualTlsServer() {
    absl::StatusOr<testing::TestCertificates> certificates = testing::TestCertificates::Make();
    EXPECT_TRUE(certificates.ok()) << certificates.status();
    if (certificates.ok()) certificates_ = *std::move(certificates);
    server_.reset();
    StartServer({.cert_path = certificates_.server_cert(),
                 .key_path = certificates_.server_key(),
                 .client_ca_path = certificates_.ca()});
    server_->SetSnapshot(kNode, "1", {Valid("tiffin", 5)});
    XdsClientOptions options = Options();
    options.tls.enabled = true;
    options.tls.server_ca_path = certificates_.ca();
    options.tls.server_name = "localhost";  // the certificate's name; the address is 127.0.0.1
    return options;
  }

  // Waits (bounded) until the metrics hold `line`.
  bool MetricsShow(const std::string& line) const {
    for (int i = 0; i < 3000; ++i) {
      if (metrics_.Render().find(line) != std::string::npos) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }

  // tollgate_xds_stream_restarts_total as rendered.
  int64_t Restarts() const {
    const std::string text = metrics_.Render();
    constexpr std::string_view kName = "\ntollgate_xds_stream_restarts_total ";
    const size_t at = text.find(kName);
    return at == std::string::npos ? -1 : std::stoll(text.substr(at + kName.size()));
  }

  // The first request the server got that `match` accepts (a test failure if none in time).
  XdsRecordedRequest Request(const std::function<bool(const XdsRecordedRequest&)>& match) {
    std::optional<XdsRecordedRequest> request = server_->WaitForRequest(match, kWait);
    EXPECT_TRUE(request.has_value());
    return request.value_or(XdsRecordedRequest{});
  }

  testing::TestCertificates certificates_;
  std::unique_ptr<XdsTestServer> server_;
  server::Metrics metrics_;
  Applied applied_;
  std::unique_ptr<XdsClient> client_;  // stopped before the server goes
};

TEST_F(AdsClientTest, SubscribesThenAcksWithTheResponsesVersionAndNonce) {
  server_->SetSnapshot(kNode, "1", {Valid("tiffin", 5)});
  XdsClientOptions options = Options();
  options.node_metadata = "zone=a,team=pay";
  options.additional_headers = {"x-tenant:blue", "Authorization: Bearer t"};
  StartClient(options);
  ASSERT_TRUE(client_->WaitForConfig(absl::Seconds(30)));
  const XdsRecordedRequest ack = Request([](const auto& r) { return r.version_info == "1"; });

  const std::vector<XdsRecordedRequest> requests = server_->requests();
  ASSERT_GE(requests.size(), 2u);
  // A new stream: the node, the type, no version yet, no nonce.
  EXPECT_EQ(requests[0].node_id, kNode);
  EXPECT_EQ(requests[0].type_url, kRateLimitConfigTypeUrl);
  EXPECT_EQ(requests[0].version_info, "");
  EXPECT_EQ(requests[0].response_nonce, "");
  EXPECT_FALSE(requests[0].nack);
  EXPECT_THAT(requests[0].metadata,
              ::testing::Contains(std::pair<std::string, std::string>("x-tenant", "blue")));
  EXPECT_THAT(requests[0].metadata, ::testing::Contains(std::pair<std::string, std::string>(
                                        "authorization", "Bearer t")));
  // The ACK: the response's version and nonce.
  ASSERT_EQ(server_->responses().size(), 1u);
  EXPECT_EQ(ack.response_nonce, server_->responses()[0].first);
  EXPECT_FALSE(ack.nack);
  EXPECT_FALSE(ack.stale);
  EXPECT_EQ(applied_.versions(), std::vector<std::string>{"1"});
  ASSERT_EQ(applied_.domains().size(), 1u);
  EXPECT_EQ(applied_.domains()[0].domain, "tiffin");
  EXPECT_EQ(client_->applied_version(), "1");

  const std::string metrics = metrics_.Render();
  EXPECT_THAT(metrics, HasSubstr("tollgate_xds_connected 1\n"));
  EXPECT_THAT(metrics, HasSubstr("tollgate_xds_config_applied_total 1\n"));
  EXPECT_THAT(metrics, HasSubstr("tollgate_xds_config_version_info{version=\"1\"} 1\n"));
  EXPECT_THAT(metrics, HasSubstr("tollgate_xds_last_applied_timestamp_seconds "));

  // A new snapshot reaches the open watch: applied and ACKed in turn. So does an empty one:
  // state of the world, no domains.
  server_->SetSnapshot(kNode, "2", {Valid("tiffin", 6), Valid("other", 1)});
  Request([](const auto& r) { return r.version_info == "2"; });
  server_->SetSnapshot(kNode, "3", {});
  Request([](const auto& r) { return r.version_info == "3"; });
  EXPECT_EQ(applied_.versions(), (std::vector<std::string>{"1", "2", "3"}));
  EXPECT_TRUE(applied_.domains().empty());
}

TEST_F(AdsClientTest, NacksAnInvalidResponseKeepingTheVersionApplied) {
  server_->SetSnapshot(kNode, "1", {Valid("tiffin", 5)});
  StartClient(Options());
  Request([](const auto& r) { return r.version_info == "1" && !r.nack; });

  server_->SetSnapshot(kNode, "2", {Valid("tiffin", 6), Invalid()});
  const XdsRecordedRequest nack = Request([](const auto& r) { return r.nack; });
  EXPECT_EQ(nack.version_info, "1");
  EXPECT_EQ(nack.error_code, 3);  // INVALID_ARGUMENT
  EXPECT_THAT(nack.error_message,
              HasSubstr("resource 'eg-rl' (domain 'default'): descriptors[0].rate_limit.unit: "
                        "expected one of second"));
  EXPECT_FALSE(nack.stale);
  // It answers the nonce of the response it rejects (the second one sent).
  EXPECT_EQ(nack.response_nonce, server_->responses()[1].first);
  // Nothing was applied. The server sends the same response again at once (its snapshot's
  // version differs from the NACK's): it is NACKed again, no faster than the backoff.
  Request([](const auto& r) { return r.nack && r.response_nonce == "3"; });
  EXPECT_EQ(applied_.versions(), std::vector<std::string>{"1"});
  EXPECT_EQ(client_->applied_version(), "1");
  EXPECT_THAT(metrics_.Render(), HasSubstr("tollgate_xds_config_applied_total 1\n"));

  // A fixed snapshot is applied.
  server_->SetSnapshot(kNode, "3", {Valid("tiffin", 7)});
  Request([](const auto& r) { return r.version_info == "3" && !r.nack; });
  EXPECT_EQ(applied_.versions(), (std::vector<std::string>{"1", "3"}));
}

TEST_F(AdsClientTest, ARefusalToApplyIsANack) {
  applied_.Refuse("domain 'tiffin' is in both tiffin.yaml and xDS resource 'tiffin'");
  server_->SetSnapshot(kNode, "1", {Valid("tiffin", 5)});
  StartClient(Options());
  const XdsRecordedRequest nack = Request([](const auto& r) { return r.nack; });
  EXPECT_EQ(nack.version_info, "");
  EXPECT_EQ(nack.error_message, "domain 'tiffin' is in both tiffin.yaml and xDS resource 'tiffin'");
  EXPECT_FALSE(client_->has_config());
  EXPECT_THAT(metrics_.Render(), HasSubstr("tollgate_xds_config_rejected_total "));
  EXPECT_THAT(metrics_.Render(), ::testing::Not(HasSubstr("tollgate_xds_config_version_info")));
}

TEST_F(AdsClientTest, IgnoresResponsesOfATypeItDidNotAskFor) {
  server_->SetSnapshot(kNode, "1", {Valid("tiffin", 5)});
  StartClient(Options());
  Request([](const auto& r) { return r.version_info == "1"; });
  google::protobuf::Any cluster;
  cluster.set_type_url("type.googleapis.com/envoy.config.cluster.v3.Cluster");
  server_->Push("type.googleapis.com/envoy.config.cluster.v3.Cluster", "7", {cluster});
  server_->SetSnapshot(kNode, "2", {Valid("tiffin", 6)});
  Request([](const auto& r) { return r.version_info == "2"; });
  // Neither ACKed nor NACKed: a request of that type would subscribe to it.
  for (const XdsRecordedRequest& request : server_->requests()) {
    EXPECT_EQ(request.type_url, kRateLimitConfigTypeUrl);
    EXPECT_FALSE(request.nack);
    EXPECT_FALSE(request.stale);
  }
}

TEST_F(AdsClientTest, ReconnectsAskingForTheVersionApplied) {
  server_->SetSnapshot(kNode, "1", {Valid("tiffin", 5)});
  StartClient(Options());
  Request([](const auto& r) { return r.version_info == "1"; });

  server_->Stop();
  // The stream ends; the config applied stays.
  ASSERT_TRUE(client_->has_config());
  ASSERT_TRUE(server_->Restart().ok());
  const XdsRecordedRequest again =
      Request([](const auto& r) { return r.stream > 1 && r.response_nonce.empty(); });
  EXPECT_EQ(again.version_info, "1");
  EXPECT_EQ(again.node_id, kNode);
  EXPECT_EQ(applied_.versions(), std::vector<std::string>{"1"});  // nothing new to send
  EXPECT_TRUE(MetricsShow("tollgate_xds_connected 1\n"));
  EXPECT_GE(Restarts(), 1);

  server_->SetSnapshot(kNode, "2", {Valid("tiffin", 6)});
  Request([](const auto& r) { return r.version_info == "2"; });
}

TEST_F(AdsClientTest, StopsPromptlyWhileConnectedAndWhileWaitingToRetry) {
  server_->SetSnapshot(kNode, "1", {Valid("tiffin", 5)});
  StartClient(Options());
  Request([](const auto& r) { return r.version_info == "1"; });
  client_->Stop();
  client_->Stop();  // idempotent
  EXPECT_THAT(metrics_.Render(), HasSubstr("tollgate_xds_connected 0\n"));

  // A server that is gone, and a backoff of a day: Stop() cuts the wait short.
  server_->Stop();
  XdsClientOptions options = Options();
  options.backoff_initial_ms = 86'400'000;
  options.backoff_max_ms = 86'400'000;
  StartClient(options);
  client_.reset();
}

TEST_F(AdsClientTest, MutualTlsWithTheServerNameOverridden) {
  XdsClientOptions options = StartMutualTlsServer();
  options.tls.client_cert_path = certificates_.client_cert();
  options.tls.client_key_path = certificates_.client_key();
  StartClient(options);
  ASSERT_TRUE(client_->WaitForConfig(absl::Seconds(30)));
  Request([](const auto& r) { return r.version_info == "1"; });
}

TEST_F(AdsClientTest, WithoutItsCertificateTheServerNeverSeesARequest) {
  StartClient(StartMutualTlsServer());
  // Streams fail and are retried; none gets through the handshake.
  for (int i = 0; i < 3000 && Restarts() < 3; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_GE(Restarts(), 3);
  EXPECT_TRUE(server_->requests().empty());
  EXPECT_FALSE(client_->has_config());
}

TEST(AdsClientOptionsTest, UnusableOptionsAreRefusedNamingTheOption) {
  auto start = [](XdsClientOptions options) {
    if (options.server_address.empty()) options.server_address = "127.0.0.1:1";
    return XdsClient::Start(options, [](auto, const std::string&) { return absl::OkStatus(); })
        .status();
  };
  XdsClientOptions options;
  options.node_metadata = "zone=a,broken";
  EXPECT_THAT(start(options).message(), HasSubstr("--xds-node-metadata"));
  options = {};
  options.additional_headers = {"x-ok:1", "no colon"};
  EXPECT_THAT(start(options).message(), HasSubstr("--xds-header"));
  options = {};
  options.additional_headers = {"grpc-timeout:1S"};
  EXPECT_THAT(start(options).message(), HasSubstr("--xds-header"));
  options = {};
  options.backoff_initial_ms = 70'000;  // above the max
  EXPECT_THAT(start(options).message(), HasSubstr("--xds-backoff-initial-ms"));
  options = {};
  options.node_id = "";
  EXPECT_THAT(start(options).message(), HasSubstr("--xds-node-id"));
  options = {};
  options.tls.client_cert_path = "/cert.pem";  // without --xds-tls
  EXPECT_THAT(start(options).message(), HasSubstr("need --xds-tls"));
  options.tls.enabled = true;  // without its key
  EXPECT_THAT(start(options).message(), HasSubstr("--xds-tls-key"));
  options.tls.client_key_path = "/nonexistent/key.pem";
  const absl::Status missing = start(options);
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("--xds-tls-cert: /cert.pem"));
}

}  // namespace
}  // namespace tollgate::xds
