// Copyright tollgate authors. A real `tollgate serve --xds-server ...` fed by a real xDS server
// (tests/support/xds_server.h, go-control-plane's behaviour), asked over real gRPC
// (ShouldRateLimit): starting with and without a config, ACKs and NACKs as the control plane
// sees them, enforcement of each version applied, the control plane going away and coming
// back, mTLS to it, and a domain given by both a file and xDS.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "boost/beast/http.hpp"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "tests/support/serve_process.h"
#include "tests/support/tls_certificates.h"
#include "tests/support/xds_server.h"

namespace tollgate {
namespace {

namespace http = boost::beast::http;
using ::envoy::service::ratelimit::v3::RateLimitRequest;
using ::envoy::service::ratelimit::v3::RateLimitResponse;
using ::envoy::service::ratelimit::v3::RateLimitService;
using ::testing::HasSubstr;
using ::tollgate::testing::HttpTestClient;
using ::tollgate::testing::RateLimitConfigFromText;
using ::tollgate::testing::ServeProcess;
using ::tollgate::testing::XdsRecordedRequest;
using ::tollgate::testing::XdsTestServer;

constexpr char kNode[] = "envoy-ratelimit";
constexpr auto kOver = RateLimitResponse::OVER_LIMIT;

// Envoy Gateway's shape: one resource per domain, named after it. `limit` per minute per user.
ratelimit::config::ratelimit::v3::RateLimitConfig Tiffin(int limit) {
  return RateLimitConfigFromText(absl::StrCat(R"pb(
                                                name: "tiffin"
                                                domain: "tiffin"
                                                descriptors {
                                                  key: "user"
                                                  rate_limit { unit: MINUTE requests_per_unit:)pb",
                                              limit, " } }"));
}

class XdsConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<XdsTestServer>> xds = XdsTestServer::Start();
    ASSERT_TRUE(xds.ok()) << xds.status();
    xds_ = *std::move(xds);
  }

  // serve with --xds-server (short backoffs) and `args`; no --config unless `args` has one.
  void StartServe(std::vector<std::string> args) {
    std::vector<std::string> all = {"--xds-server",
                                    xds_->address(),
                                    "--xds-node-id",
                                    kNode,
                                    "--xds-backoff-initial-ms",
                                    "100",
                                    "--xds-backoff-max-ms",
                                    "500"};
    all.insert(all.end(), args.begin(), args.end());
    serve_ = ServeProcess::StartWithArgs(all);
    ASSERT_NE(serve_, nullptr);
    stub_ = RateLimitService::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", serve_->grpc_port()), grpc::InsecureChannelCredentials()));
  }

  RateLimitResponse Ask(const std::string& domain, const std::string& user) {
    RateLimitRequest request;
    request.set_domain(domain);
    auto* entry = request.add_descriptors()->add_entries();
    entry->set_key("user");
    entry->set_value(user);
    RateLimitResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    grpc::Status status = stub_->ShouldRateLimit(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }

  // How many requests of `user` pass before the first refusal (at most `most` asked).
  int Allowed(const std::string& domain, const std::string& user, int most = 20) {
    for (int i = 0; i < most; ++i) {
      if (Ask(domain, user).overall_code() == kOver) return i;
    }
    return most;
  }

  std::string Get(const std::string& target) {
    HttpTestClient client(serve_->port());
    auto reply = client.Send(http::verb::get, target);
    EXPECT_TRUE(reply.has_value());
    return reply.has_value() ? reply->body() : "";
  }

  // The request `match` accepts, waited for up to `timeout` (a test failure if none).
  XdsRecordedRequest Request(const std::function<bool(const XdsRecordedRequest&)>& match,
                             std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    std::optional<XdsRecordedRequest> request = xds_->WaitForRequest(match, timeout);
    EXPECT_TRUE(request.has_value()) << "log:\n" << (serve_ ? serve_->log() : "");
    return request.value_or(XdsRecordedRequest{});
  }

  // Waits (bounded) until /metrics holds `line`.
  bool MetricsShow(const std::string& line) {
    for (int i = 0; i < 600; ++i) {
      if (Get("/metrics").find(line) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  std::unique_ptr<XdsTestServer> xds_;
  std::unique_ptr<ServeProcess> serve_;
  std::unique_ptr<RateLimitService::Stub> stub_;
};

TEST_F(XdsConfigTest, VersionsAppliedAckedEnforcedAndKeptThroughAnOutage) {
  StartServe({"--start-without-config"});
  // No config yet: every request is OK with no limits, and /readyz says so.
  EXPECT_EQ(Allowed("tiffin", "a"), 20);
  EXPECT_TRUE(Ask("tiffin", "a").statuses().empty());
  EXPECT_THAT(Get("/readyz"), HasSubstr("no config from xDS yet: answering OK with no limits"));
  Request([](const auto& r) { return r.node_id == kNode && r.version_info.empty(); });

  // v1: ACKed with its version and nonce, then enforced.
  xds_->SetSnapshot(kNode, "1", {Tiffin(2)});
  const XdsRecordedRequest ack1 = Request([](const auto& r) { return r.version_info == "1"; });
  EXPECT_FALSE(ack1.nack);
  EXPECT_EQ(ack1.response_nonce, xds_->responses().at(0).first);
  EXPECT_EQ(Allowed("tiffin", "b"), 2);
  EXPECT_EQ(Get("/readyz"), "{\"status\":\"ready\"}\n");
  EXPECT_TRUE(MetricsShow("tollgate_xds_config_version_info{version=\"1\"} 1"));

  // v2: applied and ACKed within 3 s.
  xds_->SetSnapshot(kNode, "2", {Tiffin(4)});
  Request([](const auto& r) { return r.version_info == "2" && !r.nack; }, std::chrono::seconds(3));
  EXPECT_EQ(Allowed("tiffin", "c"), 4);

  // v3, invalid: NACKed naming the field; v2 still enforced.
  xds_->SetSnapshot(kNode, "3", {RateLimitConfigFromText(R"pb(name: "tiffin"
                                                              domain: "tiffin"
                                                              descriptors {
                                                                key: "user"
                                                                rate_limit { requests_per_unit: 1 }
                                                              })pb")});
  const XdsRecordedRequest nack = Request([](const auto& r) { return r.nack; });
  EXPECT_EQ(nack.version_info, "2");
  EXPECT_EQ(nack.error_code, 3);
  EXPECT_THAT(nack.error_message,
              HasSubstr("resource 'tiffin' (domain 'tiffin'): descriptors[0].rate_limit.unit: "
                        "expected one of second"));
  EXPECT_EQ(Allowed("tiffin", "d"), 4);
  EXPECT_TRUE(MetricsShow("tollgate_xds_config_rejected_total "));
  EXPECT_THAT(serve_->log(), HasSubstr("xds: rejected version 3: resource 'tiffin'"));

  // The control plane goes away: v2 still enforced, not connected.
  xds_->Stop();
  EXPECT_TRUE(MetricsShow("tollgate_xds_connected 0\n"));
  EXPECT_EQ(Allowed("tiffin", "e"), 4);

  // It comes back: the client subscribes again asking for version 2.
  const int last_stream = xds_->requests().back().stream;
  ASSERT_TRUE(xds_->Restart().ok());
  const XdsRecordedRequest again =
      Request([&](const auto& r) { return r.stream > last_stream && r.response_nonce.empty(); });
  EXPECT_EQ(again.version_info, "2");
  EXPECT_EQ(again.node_id, kNode);
  EXPECT_TRUE(MetricsShow("tollgate_xds_connected 1\n"));
  xds_->SetSnapshot(kNode, "4", {Tiffin(1)});
  Request([](const auto& r) { return r.version_info == "4" && !r.nack; });
  EXPECT_EQ(Allowed("tiffin", "f"), 1);
  EXPECT_EQ(serve_->Stop(), 0);
}

TEST_F(XdsConfigTest, WithoutStartWithoutConfigThePortsOpenWithTheFirstConfig) {
  std::atomic<bool> started{false};
  std::thread starter([&] {
    StartServe({});
    started = true;
  });
  // The client asks; serve is not listening and cannot be: it has no config.
  Request([](const auto& r) { return r.node_id == kNode; });
  EXPECT_FALSE(started);
  xds_->SetSnapshot(kNode, "1", {Tiffin(2)});
  starter.join();
  ASSERT_NE(serve_, nullptr);
  const std::string log = serve_->log();
  const size_t waiting = log.find("xds: waiting for the first config from");
  const size_t applied = log.find("xds: applied version 1 (1 domain)");
  const size_t listening = log.find("listening http=");
  ASSERT_NE(waiting, std::string::npos) << log;
  ASSERT_NE(applied, std::string::npos) << log;
  EXPECT_LT(waiting, applied);
  EXPECT_LT(applied, listening);
  EXPECT_EQ(Allowed("tiffin", "a"), 2);
  EXPECT_EQ(Get("/readyz"), "{\"status\":\"ready\"}\n");
  EXPECT_EQ(serve_->Stop(), 0);
}

TEST_F(XdsConfigTest, MutualTlsToTheControlPlane) {
  absl::StatusOr<testing::TestCertificates> certificates = testing::TestCertificates::Make();
  ASSERT_TRUE(certificates.ok()) << certificates.status();
  xds_.reset();
  absl::StatusOr<std::unique_ptr<XdsTestServer>> xds =
      XdsTestServer::Start({.cert_path = certificates->server_cert(),
                            .key_path = certificates->server_key(),
                            .client_ca_path = certificates->ca()});
  ASSERT_TRUE(xds.ok()) << xds.status();
  xds_ = *std::move(xds);
  xds_->SetSnapshot(kNode, "1", {Tiffin(3)});
  StartServe({"--xds-tls", "--xds-tls-ca", certificates->ca(), "--xds-tls-cert",
              certificates->client_cert(), "--xds-tls-key", certificates->client_key(),
              "--xds-tls-server-name", "localhost", "--xds-header", "x-tenant:blue"});
  const XdsRecordedRequest ack = Request([](const auto& r) { return r.version_info == "1"; });
  EXPECT_THAT(ack.metadata,
              ::testing::Contains(std::pair<std::string, std::string>("x-tenant", "blue")));
  EXPECT_EQ(Allowed("tiffin", "a"), 3);
  EXPECT_EQ(serve_->Stop(), 0);
}

TEST_F(XdsConfigTest, ADomainAlsoInAFileIsNackedNamingTheFile) {
  const std::string dir = testing::MakeTempDir("tollgate-xds");
  const std::string file = dir + "/tiffin.yaml";
  testing::WriteFile(file, R"(domain: tiffin
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
)");
  const std::string limits = dir + "/files.yaml";
  testing::WriteFile(limits, R"(domain: files
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
)");
  xds_->SetSnapshot(kNode, "1", {Tiffin(2)});
  StartServe({"--config", file, "--config", limits, "--start-without-config"});
  const XdsRecordedRequest nack = Request([](const auto& r) { return r.nack; });
  EXPECT_EQ(nack.version_info, "");
  EXPECT_EQ(nack.error_message,
            absl::StrCat("domain 'tiffin' is in both ", file, " and xDS resource 'tiffin'"));
  EXPECT_EQ(Allowed("tiffin", "a"), 5);  // the file's

  // Another domain over xDS serves beside the files', and a reload of the files keeps it.
  auto other = Tiffin(2);
  other.set_name("shop");
  other.set_domain("shop");
  xds_->SetSnapshot(kNode, "2", {other});
  Request([](const auto& r) { return r.version_info == "2" && !r.nack; });
  serve_->Signal(SIGHUP);
  for (int i = 0; i < 600 && serve_->log().find("config reloaded (SIGHUP)") == std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_THAT(serve_->log(), HasSubstr("config reloaded (SIGHUP)"));
  EXPECT_EQ(Allowed("shop", "a"), 2);
  EXPECT_EQ(Allowed("files", "a"), 1);
  EXPECT_EQ(Allowed("tiffin", "b"), 5);
  EXPECT_EQ(serve_->Stop(), 0);
}

TEST(XdsServeUsageTest, NeitherConfigNorXdsServerIsAUsageError) {
  const std::string dir = testing::MakeTempDir("tollgate-xds-usage");
  absl::StatusOr<testing::Subprocess> serve =
      testing::Subprocess::Start({TOLLGATE_BINARY, "serve"}, dir + "/log");
  ASSERT_TRUE(serve.ok()) << serve.status();
  EXPECT_EQ(serve->Wait(), 2);
  EXPECT_THAT(testing::ReadFileText(dir + "/log"),
              HasSubstr("serve needs a config: --config FILE, --config-dir DIR or --xds-server"));
}

}  // namespace
}  // namespace tollgate
