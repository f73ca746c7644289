// Copyright tollgate authors. tollgate where Envoy Gateway runs envoyproxy/ratelimit: the binary
// called as `ratelimit` with exactly the environment Envoy Gateway's rate-limit Deployment sets
// (internal/infrastructure/kubernetes/ratelimit/resource.go: config over xDS with mTLS, gRPC
// with TLS and client certificates, Prometheus on its own port), but for loopback addresses
// and free ports; a real xDS server serving RateLimitConfig resources over mTLS as Envoy
// Gateway's does (tests/support/xds_server.h); Envoy's side played by a gRPC client with a
// client certificate; a real redis-server. Certificates are made by the test, one for the
// rate-limit service's two roles (server of gRPC, client of xDS) as Envoy Gateway mounts one
// at /certs.
#include <chrono>
#include <filesystem>
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
#include "tests/support/process.h"
#include "tests/support/redis_cluster.h"
#include "tests/support/redis_server.h"
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
using ::tollgate::testing::FreePort;
using ::tollgate::testing::HttpTestClient;
using ::tollgate::testing::MakeTempDir;
using ::tollgate::testing::RateLimitConfigFromText;
using ::tollgate::testing::ReadFileText;
using ::tollgate::testing::RedisServer;
using ::tollgate::testing::ServeProcess;
using ::tollgate::testing::TestCertificates;
using ::tollgate::testing::XdsRecordedRequest;
using ::tollgate::testing::XdsTestServer;

constexpr char kNode[] = "envoy-ratelimit";  // Envoy Gateway's InfraName

// What Envoy Gateway's translator writes for a BackendTrafficPolicy of `limit` requests a
// minute per value of the x-user-id header: one resource per domain, nested descriptors.
ratelimit::config::ratelimit::v3::RateLimitConfig Policy(int limit) {
  return RateLimitConfigFromText(
      absl::StrCat(R"pb(
                     name: "default/eg/http"
                     domain: "default/eg/http"
                     descriptors { key: "httproute/default/backend/rule/0/match/0/example_com"
                                   value: "httproute/default/backend/rule/0/match/0/example_com"
                                   descriptors { key: "rule-0-match-0"
                                                 rate_limit { unit: MINUTE requests_per_unit:)pb",
                   limit, R"pb(}
                               }
    })pb"));
}

// A policy the service must refuse: a rate without a unit.
ratelimit::config::ratelimit::v3::RateLimitConfig BrokenPolicy() {
  return RateLimitConfigFromText(R"pb(
    name: "default/eg/http"
    domain: "default/eg/http"
    descriptors {
      key: "broken"
      rate_limit { requests_per_unit: 5 }
    })pb");
}

std::string ReadSecret(const std::string& path) { return ReadFileText(path); }

class EnvoyGatewayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<TestCertificates> certificates = TestCertificates::Make();
    ASSERT_TRUE(certificates.ok()) << certificates.status();
    certs_ = *std::move(certificates);
    // Envoy Gateway's /certs/tls.crt: the rate-limit service's one certificate, a gRPC server
    // for Envoy and an xDS client of Envoy Gateway.
    ASSERT_TRUE(certs_
                    .AddCertificate("tls", "ca", "envoy-ratelimit",
                                    "subjectAltName=DNS:localhost,IP:127.0.0.1")
                    .ok());
    absl::StatusOr<std::unique_ptr<RedisServer>> redis = RedisServer::Start();
    ASSERT_TRUE(redis.ok()) << redis.status();
    redis_ = *std::move(redis);
    // The node certificate names 127.0.0.1, the address the service dials.
    absl::StatusOr<std::unique_ptr<XdsTestServer>> xds =
        XdsTestServer::Start({.cert_path = certs_.node_cert(),
                              .key_path = certs_.node_key(),
                              .client_ca_path = certs_.ca()});
    ASSERT_TRUE(xds.ok()) << xds.status();
    xds_ = *std::move(xds);
  }

  // Envoy Gateway's environment for its rate-limit container (resource.go's
  // expectedRateLimitContainerEnv, with Redis and Prometheus on), with loopback addresses
  // and free ports where it has fixed ones.
  std::vector<std::string> Environment() {
    return {
        "RUNTIME_ROOT=/data",
        "RUNTIME_SUBDIRECTORY=ratelimit",
        "RUNTIME_IGNOREDOTFILES=true",
        "RUNTIME_WATCH_ROOT=false",
        "LOG_LEVEL=info",
        "USE_STATSD=false",
        "CONFIG_TYPE=GRPC_XDS_SOTW",
        // An address, not a name: gRPC's DNS resolver (c-ares) keeps a few bytes to the end,
        // which LeakSanitizer would report at the service's exit.
        absl::StrCat("CONFIG_GRPC_XDS_SERVER_URL=127.0.0.1:", xds_->port()),
        absl::StrCat("CONFIG_GRPC_XDS_NODE_ID=", kNode),
        "GRPC_SERVER_USE_TLS=true",
        "GRPC_SERVER_TLS_CERT=" + certs_.Pem("tls"),
        "GRPC_SERVER_TLS_KEY=" + certs_.Key("tls"),
        "GRPC_SERVER_TLS_CA_CERT=" + certs_.ca(),
        "CONFIG_GRPC_XDS_SERVER_USE_TLS=true",
        "CONFIG_GRPC_XDS_CLIENT_TLS_CERT=" + certs_.Pem("tls"),
        "CONFIG_GRPC_XDS_CLIENT_TLS_KEY=" + certs_.Key("tls"),
        "CONFIG_GRPC_XDS_SERVER_TLS_CACERT=" + certs_.ca(),
        "FORCE_START_WITHOUT_INITIAL_CONFIG=true",
        "REDIS_SOCKET_TYPE=tcp",
        absl::StrCat("REDIS_URL=127.0.0.1:", redis_->port()),
        "USE_PROMETHEUS=true",
        absl::StrCat("PROMETHEUS_ADDR=127.0.0.1:", FreePort()),
        "PROMETHEUS_MAPPER_YAML=/etc/statsd-exporter/conf.yaml",
        // Envoy Gateway's fixed ports (8080, 8081), made free ones on loopback.
        "HOST=127.0.0.1",
        absl::StrCat("PORT=", FreePort()),
        "GRPC_HOST=127.0.0.1",
        absl::StrCat("GRPC_PORT=", FreePort()),
        // What Envoy Gateway's users add to the container to get another algorithm than its
        // API can name (rateLimitDeployment.container.env).
        "TOLLGATE_DEFAULT_ALGORITHM=token_bucket",
    };
  }

  // Envoy's channel to the service: TLS trusting the CA, with a client certificate unless
  // `with_certificate` is false.
  std::unique_ptr<RateLimitService::Stub> Envoy(bool with_certificate = true) {
    grpc::SslCredentialsOptions tls;
    tls.pem_root_certs = ReadSecret(certs_.ca());
    if (with_certificate) {
      tls.pem_cert_chain = ReadSecret(certs_.client_cert());
      tls.pem_private_key = ReadSecret(certs_.client_key());
    }
    grpc::ChannelArguments arguments;
    arguments.SetInt("grpc.use_local_subchannel_pool", 1);  // a connection of its own
    return RateLimitService::NewStub(grpc::CreateCustomChannel(
        absl::StrCat("127.0.0.1:", service_->grpc_port()), grpc::SslCredentials(tls), arguments));
  }

  // Envoy's request for the policy's route and user `user`.
  grpc::Status Ask(RateLimitService::Stub& stub, const std::string& user,
                   RateLimitResponse* response) {
    RateLimitRequest request;
    request.set_domain("default/eg/http");
    auto* descriptor = request.add_descriptors();
    auto* route = descriptor->add_entries();
    route->set_key("httproute/default/backend/rule/0/match/0/example_com");
    route->set_value("httproute/default/backend/rule/0/match/0/example_com");
    auto* header = descriptor->add_entries();
    header->set_key("rule-0-match-0");
    header->set_value(user);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return stub.ShouldRateLimit(&context, request, response);
  }

  // How many of `n` requests of `user` are answered OK.
  int Admitted(RateLimitService::Stub& stub, const std::string& user, int n) {
    int ok = 0;
    for (int i = 0; i < n; ++i) {
      RateLimitResponse response;
      grpc::Status status = Ask(stub, user, &response);
      EXPECT_TRUE(status.ok()) << status.error_message();
      ok += status.ok() && response.overall_code() == RateLimitResponse::OK;
    }
    return ok;
  }

  std::string Get(int port, const std::string& target, int* status = nullptr) {
    HttpTestClient client(port);
    std::optional<testing::HttpTestResponse> response = client.Send(http::verb::get, target);
    if (status != nullptr) *status = response ? static_cast<int>(response->result_int()) : -1;
    return response ? response->body() : "";
  }

  TestCertificates certs_;
  std::unique_ptr<RedisServer> redis_;
  std::unique_ptr<XdsTestServer> xds_;
  std::unique_ptr<ServeProcess> service_;
};

TEST_F(EnvoyGatewayTest, ServesEnvoyGatewaysPoliciesOverXdsAndMtls) {
  const std::string dir = MakeTempDir("envoy-gateway");
  std::filesystem::create_symlink(TOLLGATE_BINARY, dir + "/ratelimit");
  service_ = ServeProcess::StartCommand({dir + "/ratelimit"}, Environment(), dir);
  ASSERT_NE(service_, nullptr);
  ASSERT_NE(service_->metrics_port(), 0) << service_->log();
  std::unique_ptr<RateLimitService::Stub> envoy = Envoy();

  // Started without a config (FORCE_START_WITHOUT_INITIAL_CONFIG): every request OK, and
  // /readyz says why.
  RateLimitResponse response;
  ASSERT_TRUE(Ask(*envoy, "before", &response).ok());
  EXPECT_EQ(response.overall_code(), RateLimitResponse::OK);
  EXPECT_THAT(Get(service_->port(), "/readyz"), HasSubstr("no config from xDS yet"));
  int health = 0;
  EXPECT_EQ(Get(service_->port(), "/healthcheck", &health), "OK");
  EXPECT_EQ(health, 200);

  // v1: applied and ACKed (version and nonce echoed), then enforced over mTLS.
  xds_->SetSnapshot(kNode, "1", {Policy(3)});
  std::optional<XdsRecordedRequest> ack_1 = xds_->WaitForRequest(
      [](const XdsRecordedRequest& r) { return r.version_info == "1" && !r.nack; });
  ASSERT_TRUE(ack_1.has_value()) << service_->log();
  EXPECT_EQ(ack_1->node_id, kNode);
  EXPECT_FALSE(ack_1->response_nonce.empty());
  EXPECT_EQ(Admitted(*envoy, "alice", 5), 3);
  // The rule names no algorithm: the default given in the environment, a token bucket, whose
  // key is one per user (a window's key ends in its window's index).
  absl::StatusOr<redis::RedisReply> keys =
      testing::RedisCommand(redis_->port(), {"KEYS", "*alice*"});
  ASSERT_TRUE(keys.ok()) << keys.status();
  ASSERT_EQ(keys->elements.size(), 1u);
  EXPECT_TRUE(keys->elements[0].str.ends_with("}")) << keys->elements[0].str;

  // A client without a certificate is refused; one with a certificate keeps working.
  std::unique_ptr<RateLimitService::Stub> anonymous = Envoy(/*with_certificate=*/false);
  EXPECT_FALSE(Ask(*anonymous, "mallory", &response).ok());
  EXPECT_TRUE(Ask(*envoy, "alice", &response).ok());

  // v2 (5 a minute) applied within 3 s and ACKed.
  xds_->SetSnapshot(kNode, "2", {Policy(5)});
  ASSERT_TRUE(xds_->WaitForRequest(
                      [](const XdsRecordedRequest& r) { return r.version_info == "2" && !r.nack; },
                      std::chrono::seconds(3))
                  .has_value())
      << service_->log();
  EXPECT_EQ(Admitted(*envoy, "bob", 7), 5);

  // An invalid v3 is NACKed, naming the resource and the field; v2 keeps serving.
  xds_->SetSnapshot(kNode, "3", {BrokenPolicy()});
  std::optional<XdsRecordedRequest> nack =
      xds_->WaitForRequest([](const XdsRecordedRequest& r) { return r.nack; });
  ASSERT_TRUE(nack.has_value()) << service_->log();
  EXPECT_EQ(nack->version_info, "2");  // the last good version
  EXPECT_THAT(nack->error_message, HasSubstr("default/eg/http"));
  EXPECT_THAT(nack->error_message, HasSubstr("descriptors[0].rate_limit"));
  EXPECT_EQ(Admitted(*envoy, "carol", 7), 5);

  // The control plane goes away: v2 keeps serving. It comes back: a new stream asks again
  // from version 2.
  const int streams_before = xds_->requests().back().stream;
  xds_->Stop();
  EXPECT_EQ(Admitted(*envoy, "dave", 7), 5);
  ASSERT_TRUE(xds_->Restart().ok());
  std::optional<XdsRecordedRequest> resubscribed =
      xds_->WaitForRequest([&](const XdsRecordedRequest& r) { return r.stream > streams_before; },
                           std::chrono::seconds(60));
  ASSERT_TRUE(resubscribed.has_value()) << service_->log();
  EXPECT_EQ(resubscribed->version_info, "2");
  EXPECT_EQ(resubscribed->response_nonce, "");  // a new stream
  EXPECT_EQ(resubscribed->node_id, kNode);

  // Envoy Gateway's probe and Prometheus' scrape.
  EXPECT_EQ(Get(service_->port(), "/healthcheck", &health), "OK");
  EXPECT_EQ(health, 200);
  const std::string metrics = Get(service_->metrics_port(), "/metrics");
  EXPECT_THAT(metrics,
              HasSubstr("ratelimit_service_rate_limit_total_hits{domain=\"default/eg/http\""));
  EXPECT_THAT(metrics, HasSubstr("tollgate_xds_config_rejected_total"));
  EXPECT_THAT(metrics, HasSubstr("tollgate_grpc_tls_handshakes_total"));
  EXPECT_EQ(service_->Stop(), 0);
}

}  // namespace
}  // namespace tollgate
