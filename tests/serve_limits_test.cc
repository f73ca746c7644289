// Copyright tollgate authors. What `tollgate serve` refuses to let one client do: too many
// descriptors or checks in one request, an oversized head or gRPC message, and a client
// that sends its request too slowly. A real process on loopback ports, real HTTP and gRPC.
#include <signal.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "boost/asio/write.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/serve_process.h"

namespace tollgate {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using ::envoy::service::ratelimit::v3::RateLimitRequest;
using ::envoy::service::ratelimit::v3::RateLimitResponse;
using ::envoy::service::ratelimit::v3::RateLimitService;
using ::testing::HasSubstr;
using ::tollgate::testing::HttpTestClient;
using ::tollgate::testing::ServeProcess;

// ServeProcess takes one config file: Envoy rules for the gRPC and /json tests, our
// `limits:` format for /v1/check.
constexpr char kEnvoyConfig[] = R"(domain: shop
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
)";

constexpr char kLimitsConfig[] = R"(limits:
  wide:
    algorithm: token_bucket
    capacity: 10
    refill_per_second: 0.001
)";

nlohmann::json Json(const testing::HttpTestResponse& response) {
  return nlohmann::json::parse(response.body(), nullptr, false);
}

std::unique_ptr<RateLimitService::Stub> Stub(int port) {
  return RateLimitService::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
}

// A request for domain "shop" with `count` descriptors ("user", "<user>-<i>").
RateLimitRequest Request(int count, const std::string& user) {
  RateLimitRequest request;
  request.set_domain("shop");
  for (int i = 0; i < count; ++i) {
    auto* entry = request.add_descriptors()->add_entries();
    entry->set_key("user");
    entry->set_value(absl::StrCat(user, "-", i));
  }
  return request;
}

grpc::Status Call(RateLimitService::Stub& stub, const RateLimitRequest& request,
                  RateLimitResponse* response) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  return stub.ShouldRateLimit(&context, request, response);
}

// The JSON body of POST /json for `count` descriptors.
std::string JsonRequest(int count, const std::string& user) {
  nlohmann::json descriptors = nlohmann::json::array();
  for (int i = 0; i < count; ++i) {
    descriptors.push_back(
        {{"entries", {{{"key", "user"}, {"value", absl::StrCat(user, "-", i)}}}}});
  }
  return nlohmann::json({{"domain", "shop"}, {"descriptors", descriptors}}).dump();
}

TEST(ServeLimitsTest, TooManyDescriptorsIsInvalidArgumentOverGrpcAnd400OverJson) {
  auto server = ServeProcess::Start(kEnvoyConfig, {"--max-descriptors", "3"});
  ASSERT_NE(server, nullptr);
  const int grpc_port = server->grpc_port();
  ASSERT_GT(grpc_port, 0) << server->log();
  auto stub = Stub(grpc_port);

  RateLimitResponse response;
  grpc::Status refused = Call(*stub, Request(4, "a"), &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(), HasSubstr("4 descriptors, at most 3"));
  // Nothing of the refused request was counted: the first descriptor still has 9 after one.
  grpc::Status ok = Call(*stub, Request(3, "a"), &response);
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  ASSERT_EQ(response.statuses_size(), 3);
  EXPECT_EQ(response.statuses(0).limit_remaining(), 9u);

  HttpTestClient client(server->port());
  auto too_many = client.Send(http::verb::post, "/json", JsonRequest(4, "b"));
  ASSERT_TRUE(too_many.has_value());
  EXPECT_EQ(too_many->result_int(), 400) << too_many->body();
  EXPECT_THAT(Json(*too_many)["error"].get<std::string>(), HasSubstr("at most 3"));
  // The connection keeps serving, and nothing was counted for "b".
  auto fine = client.Send(http::verb::post, "/json", JsonRequest(3, "b"));
  ASSERT_TRUE(fine.has_value());
  EXPECT_EQ(fine->result_int(), 200) << fine->body();
  EXPECT_EQ(Json(*fine)["statuses"][0]["limitRemaining"], 9) << fine->body();
  EXPECT_EQ(server->Stop(), 0) << server->log();
}

TEST(ServeLimitsTest, TooManyChecksInABatchIs400) {
  auto server = ServeProcess::Start(kLimitsConfig, {"--max-descriptors", "2"});
  ASSERT_NE(server, nullptr);
  HttpTestClient client(server->port());
  auto three = client.Check(R"({"checks":[{"limit":"wide","key":"x"},{"limit":"wide","key":"y"},)"
                            R"({"limit":"wide","key":"z"}]})");
  ASSERT_TRUE(three.has_value());
  EXPECT_EQ(three->result_int(), 400) << three->body();
  EXPECT_EQ(Json(*three)["error"], "checks: at most 2 items, got 3") << three->body();
  auto two = client.Check(R"({"checks":[{"limit":"wide","key":"x"},{"limit":"wide","key":"y"}]})");
  ASSERT_TRUE(two.has_value());
  EXPECT_EQ(two->result_int(), 200) << two->body();
  EXPECT_EQ(Json(*two)["remaining"], 9) << two->body();
  EXPECT_EQ(server->Stop(), 0) << server->log();
}

TEST(ServeLimitsTest, HeadOverTheConfiguredSizeIs431) {
  auto server = ServeProcess::Start(kLimitsConfig, {"--max-header-bytes", "2048"});
  ASSERT_NE(server, nullptr);
  {
    HttpTestClient client(server->port());
    auto response = client.SendRaw(absl::StrCat(
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ", std::string(3000, 'a'), "\r\n\r\n"));
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->result_int(), 431);
    EXPECT_THAT(Json(*response)["error"].get<std::string>(), HasSubstr("larger than 2048"));
  }
  // Under the bound is fine.
  HttpTestClient client(server->port());
  auto response = client.SendRaw(absl::StrCat(
      "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ", std::string(1500, 'a'), "\r\n\r\n"));
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->result_int(), 200);
  EXPECT_EQ(server->Stop(), 0) << server->log();
}

TEST(ServeLimitsTest, GrpcMessageOverTheBodyLimitIsRefused) {
  auto server = ServeProcess::Start(kEnvoyConfig, {"--max-body-bytes", "2048"});
  ASSERT_NE(server, nullptr);
  const int grpc_port = server->grpc_port();
  ASSERT_GT(grpc_port, 0) << server->log();
  auto stub = Stub(grpc_port);
  RateLimitRequest big = Request(1, std::string(4000, 'u'));
  RateLimitResponse response;
  grpc::Status refused = Call(*stub, big, &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  grpc::Status ok = Call(*stub, Request(1, "small"), &response);
  EXPECT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(server->Stop(), 0) << server->log();
}

// A client that sends half a request and stalls (or trickles it byte by byte) is
// disconnected after --http-timeout-ms, and the server answers other clients meanwhile.
TEST(ServeLimitsTest, SlowClientsAreDisconnectedAndOthersKeepBeingServed) {
  signal(SIGPIPE, SIG_IGN);  // the trickling client writes into a socket the server closed
  auto server = ServeProcess::Start(kLimitsConfig, {"--http-timeout-ms", "500"});
  ASSERT_NE(server, nullptr);

  // Half a head, then nothing.
  HttpTestClient stalled_head(server->port());
  net::write(stalled_head.stream(), net::buffer(std::string("POST /v1/check HTTP/1.1\r\nHost: x")));
  // A whole head announcing a body that never comes in full.
  HttpTestClient stalled_body(server->port());
  net::write(stalled_body.stream(),
             net::buffer(std::string("POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\n"
                                     "\r\n{\"limit\":\"wide\",")));

  // Others are served while those two hang.
  for (int i = 0; i < 5; ++i) {
    HttpTestClient client(server->port());
    auto response = client.Check(absl::StrCat(R"({"limit":"wide","key":"other-)", i, R"("})"));
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->result_int(), 200);
  }

  // ClosedByServer waits up to kHttpIoTimeout (10 s, 20 times the server's timeout).
  EXPECT_TRUE(stalled_head.ClosedByServer());
  EXPECT_TRUE(stalled_body.ClosedByServer());

  // A client that keeps sending, one byte every 20 ms: a head of 2000 bytes would take 40 s;
  // the server's deadline is for the whole head, so it closes long before.
  HttpTestClient trickle(server->port());
  const std::string head =
      absl::StrCat("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ", std::string(1950, 's'), "\r\n");
  bool closed_early = false;
  for (char c : head) {
    beast::error_code error;
    net::write(trickle.stream().socket(), net::buffer(&c, 1), error);
    if (error) {
      closed_early = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Writes into a socket the peer closed fail from the second one on (EPIPE / reset).
  EXPECT_TRUE(closed_early);

  HttpTestClient client(server->port());
  auto health = client.Send(http::verb::get, "/healthz");
  ASSERT_TRUE(health.has_value());
  EXPECT_EQ(health->result_int(), 200);
  EXPECT_EQ(server->Stop(), 0) << server->log();
}

}  // namespace
}  // namespace tollgate
