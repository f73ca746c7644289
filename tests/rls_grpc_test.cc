// Copyright tollgate authors. Envoy's rate-limit service over real gRPC: grpc++'s generated
// stubs call our GrpcServer (nghttp2 on EventLoops, src/server/rls_grpc.h) started in this
// process on a free loopback port.
#include "src/server/rls_grpc.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/byte_buffer.h"
#include "gtest/gtest.h"
#include "src/server/event_loops.h"
#include "src/server/grpc_server.h"
#include "src/server/rls_service.h"
#include "tests/support/rls_requests.h"
#include "tollgate/clock.h"

namespace tollgate {
namespace {

using ::envoy::service::ratelimit::v3::RateLimitRequest;
using ::envoy::service::ratelimit::v3::RateLimitResponse;
using ::envoy::service::ratelimit::v3::RateLimitService;
using ::testing::Pair;

constexpr char kTiffin[] = R"(domain: tiffin
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: ip
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: beta
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: "/checkout*"
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 2, algorithm: sliding_window}
)";

RateLimitRequest Request(const std::vector<testing::DescriptorEntries>& descriptors,
                         uint32_t hits = 0, std::string domain = "tiffin") {
  return testing::MakeRateLimitRequest(std::move(domain), descriptors, hits);
}

class RlsGrpcTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(/*global_shadow=*/false); }

  void Start(bool global_shadow, server::GrpcServerOptions options = {}) {
    Stop();
    absl::StatusOr<std::unique_ptr<server::EventLoops>> loops = server::EventLoops::Start(2);
    ASSERT_TRUE(loops.ok()) << loops.status();
    loops_ = *std::move(loops);
    server::RlsServiceOptions service_options;
    absl::StatusOr<EnvoyDomainConfig> config = ParseEnvoyConfig(kTiffin, "tiffin.yaml");
    ASSERT_TRUE(config.ok()) << config.status();
    service_options.domains.push_back(*std::move(config));
    service_options.clock = &clock_;
    service_options.shadow_mode = global_shadow;
    absl::StatusOr<std::unique_ptr<server::RlsService>> service =
        server::RlsService::Create(std::move(service_options));
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = *std::move(service);
    server::GrpcMethods methods;
    server::AddRlsGrpcMethods(methods, *service_, health_);
    // A method that answers only when the test says so (Hung()).
    methods.AddUnary(kHangPath, [this](std::string_view, server::GrpcResponder responder) {
      absl::MutexLock lock(&hung_mu_);
      hung_.push_back(std::move(responder));
    });
    options.address = {"127.0.0.1", 0};  // the kernel picks a free port
    absl::StatusOr<std::unique_ptr<server::GrpcServer>> server =
        server::GrpcServer::Start(*loops_, options, std::move(methods));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    ASSERT_GT(server_->port(), 0);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = RateLimitService::NewStub(channel_);
  }

  void Stop() {
    {
      absl::MutexLock lock(&hung_mu_);
      hung_.clear();
    }
    stub_.reset();
    channel_.reset();
    if (server_ != nullptr) server_->Shutdown(std::chrono::seconds(5));
    server_.reset();
    loops_.reset();
    service_.reset();
  }

  void TearDown() override { Stop(); }

  // Waits (up to 10 s) until `count` calls of kHangPath are held, then hands them over.
  std::vector<server::GrpcResponder> Hung(size_t count) {
    absl::MutexLock lock(&hung_mu_);
    auto enough = [this, count]()
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(hung_mu_) { return hung_.size() >= count; };
    hung_mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(10));
    return std::exchange(hung_, {});
  }

  // A call with `bytes` as the request message, to any method (grpc++'s generic stub).
  grpc::Status RawCall(const std::string& method, const std::string& bytes,
                       std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    grpc::GenericStub stub(channel_);
    grpc::CompletionQueue queue;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + timeout);
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    grpc::Status status;
    auto reader = stub.PrepareUnaryCall(&context, method, request, &queue);
    reader->StartCall();
    reader->Finish(&response, &status, reinterpret_cast<void*>(1));
    void* tag = nullptr;
    bool ok = false;
    EXPECT_TRUE(queue.Next(&tag, &ok));
    queue.Shutdown();
    while (queue.Next(&tag, &ok)) {
    }
    return status;
  }

  grpc::health::v1::HealthCheckResponse::ServingStatus Health(const std::string& name,
                                                              grpc::StatusCode* code) {
    auto health = grpc::health::v1::Health::NewStub(channel_);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(name);
    grpc::health::v1::HealthCheckResponse response;
    *code = health->Check(&context, request, &response).error_code();
    return response.status();
  }

  static constexpr char kHangPath[] = "/tollgate.test.Slow/Hang";

  grpc::Status Call(const RateLimitRequest& request, RateLimitResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return stub_->ShouldRateLimit(&context, request, response);
  }

  RateLimitResponse Call(const RateLimitRequest& request) {
    RateLimitResponse response;
    grpc::Status status = Call(request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }

  SimulatedClock clock_{1'700'000'040'000'000};  // a minute boundary
  server::GrpcHealth health_;
  absl::Mutex hung_mu_;
  std::vector<server::GrpcResponder> hung_ ABSL_GUARDED_BY(hung_mu_);
  std::unique_ptr<server::EventLoops> loops_;
  std::unique_ptr<server::RlsService> service_;
  std::unique_ptr<server::GrpcServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<RateLimitService::Stub> stub_;
};

TEST_F(RlsGrpcTest, OkThenOverLimitWithRemainingResetAndHeaders) {
  for (uint32_t remaining : {2u, 1u, 0u}) {
    RateLimitResponse response = Call(Request({{{"user", "alice"}}}));
    EXPECT_EQ(response.overall_code(), RateLimitResponse::OK);
    ASSERT_EQ(response.statuses_size(), 1);
    const auto& status = response.statuses(0);
    EXPECT_EQ(status.code(), RateLimitResponse::OK);
    EXPECT_EQ(status.limit_remaining(), remaining);
    EXPECT_EQ(status.current_limit().requests_per_unit(), 3u);
    EXPECT_EQ(status.current_limit().unit(), RateLimitResponse::RateLimit::MINUTE);
  }
  clock_.AdvanceMillis(15'000);
  RateLimitResponse refused = Call(Request({{{"user", "alice"}}}));
  EXPECT_EQ(refused.overall_code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(refused.statuses(0).code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(refused.statuses(0).limit_remaining(), 0u);
  EXPECT_EQ(refused.statuses(0).duration_until_reset().seconds(), 45);
  std::vector<std::pair<std::string, std::string>> headers;
  for (const auto& header : refused.response_headers_to_add()) {
    headers.emplace_back(header.key(), header.value());
  }
  EXPECT_THAT(headers,
              ::testing::ElementsAre(Pair("RateLimit-Limit", "3"), Pair("RateLimit-Remaining", "0"),
                                     Pair("RateLimit-Reset", "45")));
}

TEST_F(RlsGrpcTest, StatusesFollowTheDescriptorsInOrder) {
  RateLimitResponse response = Call(Request(
      {{{"ip", "1.1.1.1"}}, {{"unknown", "x"}}, {{"path", "/checkout/pay"}, {"user", "bo"}}}));
  EXPECT_EQ(response.overall_code(), RateLimitResponse::OK);
  ASSERT_EQ(response.statuses_size(), 3);
  EXPECT_EQ(response.statuses(0).current_limit().requests_per_unit(), 5u);
  EXPECT_FALSE(response.statuses(1).has_current_limit());
  EXPECT_EQ(response.statuses(2).current_limit().requests_per_unit(), 2u);
  EXPECT_EQ(response.statuses(2).current_limit().unit(), RateLimitResponse::RateLimit::HOUR);
}

TEST_F(RlsGrpcTest, CallsLargerThanTheArenasFirstBlockAreAnsweredInFull) {
  // 40 descriptors of 200-byte values: request and answer outgrow the per-call arena's inline
  // block (2 KiB), so parsing and the answer continue on heap blocks of the same arena.
  std::vector<std::vector<std::pair<std::string, std::string>>> descriptors;
  for (int i = 0; i < 40; ++i) {
    descriptors.push_back({{"ip", absl::StrCat(i, std::string(200, 'x'))}});
  }
  for (uint32_t remaining : {4u, 3u}) {
    RateLimitResponse response = Call(Request(descriptors));
    EXPECT_EQ(response.overall_code(), RateLimitResponse::OK);
    ASSERT_EQ(response.statuses_size(), 40);
    for (const auto& status : response.statuses()) {
      EXPECT_EQ(status.code(), RateLimitResponse::OK);
      EXPECT_EQ(status.limit_remaining(), remaining);
      EXPECT_EQ(status.current_limit().requests_per_unit(), 5u);
    }
    EXPECT_EQ(response.response_headers_to_add_size(), 3);
  }
}

TEST_F(RlsGrpcTest, HitsAddendCountsSeveralHits) {
  EXPECT_EQ(Call(Request({{{"ip", "2.2.2.2"}}}, 4)).statuses(0).limit_remaining(), 1u);
  RateLimitResponse refused = Call(Request({{{"ip", "2.2.2.2"}}}, 2));
  EXPECT_EQ(refused.overall_code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(Call(Request({{{"ip", "2.2.2.2"}}}, 1)).statuses(0).limit_remaining(), 0u);
}

TEST_F(RlsGrpcTest, PerDescriptorOverrideAndHitsAddend) {
  RateLimitRequest request = Request({{{"user", "cy"}}}, 1);
  auto* descriptor = request.mutable_descriptors(0);
  descriptor->mutable_limit()->set_requests_per_unit(10);
  descriptor->mutable_limit()->set_unit(envoy::type::v3::DAY);
  descriptor->mutable_hits_addend()->set_value(7);
  RateLimitResponse response = Call(request);
  EXPECT_EQ(response.overall_code(), RateLimitResponse::OK);
  EXPECT_EQ(response.statuses(0).current_limit().requests_per_unit(), 10u);
  EXPECT_EQ(response.statuses(0).current_limit().unit(), RateLimitResponse::RateLimit::DAY);
  EXPECT_EQ(response.statuses(0).limit_remaining(), 3u);
  EXPECT_EQ(Call(request).overall_code(), RateLimitResponse::OVER_LIMIT);
}

TEST_F(RlsGrpcTest, UnknownDomainIsOkWithNoStatuses) {
  RateLimitResponse response = Call(Request({{{"user", "alice"}}}, 0, "no-such-domain"));
  EXPECT_EQ(response.overall_code(), RateLimitResponse::OK);
  EXPECT_EQ(response.statuses_size(), 0);
}

TEST_F(RlsGrpcTest, ARefusalCountsNoOtherDescriptor) {
  for (int i = 0; i < 3; ++i) Call(Request({{{"user", "dee"}}}));
  for (int i = 0; i < 3; ++i) {
    RateLimitResponse refused = Call(Request({{{"ip", "3.3.3.3"}}, {{"user", "dee"}}}));
    EXPECT_EQ(refused.overall_code(), RateLimitResponse::OVER_LIMIT);
    EXPECT_EQ(refused.statuses(0).code(), RateLimitResponse::OK);
  }
  // envoyproxy/ratelimit would have spent 3 of the ip's 5 by now.
  EXPECT_EQ(Call(Request({{{"ip", "3.3.3.3"}}})).statuses(0).limit_remaining(), 4u);
}

TEST_F(RlsGrpcTest, ShadowRuleNeverRefuses) {
  for (int i = 0; i < 4; ++i) {
    RateLimitResponse response = Call(Request({{{"beta", "ed"}}}));
    EXPECT_EQ(response.overall_code(), RateLimitResponse::OK);
    EXPECT_EQ(response.statuses(0).code(), RateLimitResponse::OK);
  }
}

TEST_F(RlsGrpcTest, GlobalShadowModeNeverRefuses) {
  Start(/*global_shadow=*/true);
  for (int i = 0; i < 6; ++i) {
    RateLimitResponse response = Call(Request({{{"user", "flo"}}}, 1));
    EXPECT_EQ(response.overall_code(), RateLimitResponse::OK);
  }
}

TEST_F(RlsGrpcTest, MalformedRequestIsInvalidArgument) {
  RateLimitResponse response;
  grpc::Status status = Call(Request({}), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(RlsGrpcTest, HealthServiceAnswersServing) {
  auto health = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status status = health->Check(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(RlsGrpcTest, ServesConcurrentClients) {
  // 4 threads x 50 calls on distinct keys: every call answered, every answer OK.
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        RateLimitResponse response;
        grpc::Status status =
            Call(Request({{{"ip", absl::StrCat("10.0.", t, ".", i)}}}), &response);
        if (status.ok() && response.overall_code() == RateLimitResponse::OK) ++ok;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(ok.load(), 200);
}

TEST_F(RlsGrpcTest, HealthByBothNamesAndAnUnknownName) {
  grpc::StatusCode code;
  EXPECT_EQ(Health("", &code), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(code, grpc::StatusCode::OK);
  EXPECT_EQ(Health("ratelimit", &code), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(code, grpc::StatusCode::OK);
  Health("envoy.service.ratelimit.v3.RateLimitService.typo", &code);
  EXPECT_EQ(code, grpc::StatusCode::NOT_FOUND);
  health_.SetServing(false);
  EXPECT_EQ(Health("ratelimit", &code), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
}

TEST_F(RlsGrpcTest, RandomBytesAreInvalidArgument) {
  // 14 bytes: the literal's 13 and a NUL.
  const std::string garbage = std::string("\xff\xff\xff\xff\x0f\x12\x99random") + '\0';
  EXPECT_EQ(RawCall(server::kShouldRateLimitPath, garbage).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // The server goes on answering.
  EXPECT_EQ(Call(Request({{{"ip", "9.9.9.9"}}})).overall_code(), RateLimitResponse::OK);
}

TEST_F(RlsGrpcTest, UnknownMethodIsUnimplemented) {
  EXPECT_EQ(RawCall("/envoy.service.ratelimit.v3.RateLimitService/NoSuchMethod", "").error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(RawCall("/grpc.health.v1.Health/Watch", "").error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
}

TEST_F(RlsGrpcTest, AMessageOverTheLimitIsResourceExhausted) {
  server::GrpcServerOptions options;
  options.max_message_bytes = 4096;
  Start(/*global_shadow=*/false, options);
  RateLimitResponse response;
  grpc::Status status = Call(Request({{{"ip", std::string(5000, 'x')}}}), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  // Under the limit is answered (RlsService bounds one descriptor's entries at 1 KiB).
  std::vector<std::vector<std::pair<std::string, std::string>>> descriptors;
  for (int i = 0; i < 3; ++i) descriptors.push_back({{"ip", std::string(1000, 'a' + i)}});
  EXPECT_EQ(Call(Request(descriptors)).overall_code(), RateLimitResponse::OK);
}

TEST_F(RlsGrpcTest, DeadlineExceededAndTheLateAnswerIsIgnored) {
  grpc::Status status = RawCall(kHangPath, "", std::chrono::milliseconds(200));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  std::vector<server::GrpcResponder> hung = Hung(1);
  ASSERT_EQ(hung.size(), 1u);
  EXPECT_NE(hung[0].deadline_micros(), server::kNoGrpcDeadline);
  std::move(hung[0]).Finish(std::string("late"));  // the stream was answered: ignored
  EXPECT_EQ(Call(Request({{{"ip", "8.8.8.8"}}})).overall_code(), RateLimitResponse::OK);
}

TEST_F(RlsGrpcTest, ManyCallsInFlightOnOneChannel) {
  constexpr int kCalls = 500;
  absl::Mutex mu;
  int answered = 0;
  int ok = 0;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<RateLimitRequest> requests(kCalls);
  std::vector<RateLimitResponse> responses(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    requests[i] = Request({{{"ip", absl::StrCat("10.1.", i / 256, ".", i % 256)}}});
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    stub_->async()->ShouldRateLimit(
        contexts.back().get(), &requests[i], &responses[i], [&, i](const grpc::Status& status) {
          absl::MutexLock lock(&mu);
          ++answered;
          if (status.ok() && responses[i].overall_code() == RateLimitResponse::OK) {
            ++ok;
          }
        });
  }
  absl::MutexLock lock(&mu);
  mu.AwaitWithTimeout(absl::Condition(
                          +[](int* answered) { return *answered == kCalls; }, &answered),
                      absl::Seconds(60));
  EXPECT_EQ(answered, kCalls);
  EXPECT_EQ(ok, kCalls);
}

TEST_F(RlsGrpcTest, AClientThatDisappearsMidCallLeavesTheServerHealthy) {
  {
    // Its own channel (connection), dropped while its call is held by the server.
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                       grpc::InsecureChannelCredentials());
    grpc::GenericStub stub(channel);
    grpc::CompletionQueue queue;
    auto context = std::make_unique<grpc::ClientContext>();
    grpc::Slice empty("");
    grpc::ByteBuffer request(&empty, 1);
    grpc::ByteBuffer response;
    grpc::Status status;
    auto reader = stub.PrepareUnaryCall(context.get(), kHangPath, request, &queue);
    reader->StartCall();
    reader->Finish(&response, &status, reinterpret_cast<void*>(1));
    std::vector<server::GrpcResponder> held = Hung(1);
    ASSERT_EQ(held.size(), 1u) << "the call did not reach the server";
    context->TryCancel();
    void* tag = nullptr;
    bool ok = false;
    EXPECT_TRUE(queue.Next(&tag, &ok));
    EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED);
    queue.Shutdown();
    while (queue.Next(&tag, &ok)) {
    }
    std::move(held[0]).Finish(std::string("too late"));  // the stream was reset: ignored
  }
  // The server serves the others.
  grpc::StatusCode code;
  EXPECT_EQ(Health("", &code), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(Call(Request({{{"ip", "7.7.7.7"}}})).overall_code(), RateLimitResponse::OK);
}

}  // namespace
}  // namespace tollgate
