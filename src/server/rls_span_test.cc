// Copyright tollgate authors. RlsService's spans for what the end-to-end test
// (tests/tracing_test.cc) cannot reach: errors, a failing store, untraced callers.
#include "src/server/rls_span.h"

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "src/server/rls_service.h"
#include "tests/support/otlp_receiver.h"
#include "tests/support/rls_requests.h"
#include "tollgate/store.h"

namespace tollgate::server {
namespace {

using opentelemetry::proto::trace::v1::Status;
using testing::AttributeText;
using testing::OtlpReceiver;

// Every check fails, as a store that cannot be reached.
class FailingStore : public Store {
 public:
  void ApplyAsync(std::vector<CheckItem> items, CheckCallback done) override {
    std::move(done)(absl::UnavailableError("the store is unreachable"));
  }
  std::string_view Name() const override { return "failing"; }
};

absl::Status Ask(RlsService& service, const RateLimitRequest& request,
                 const RlsCallSource& source) {
  absl::Notification answered;
  absl::Status status;
  service.ShouldRateLimit(
      request,
      [&](const absl::StatusOr<RateLimitResponse>& response) {
        status = response.status();
        answered.Notify();
      },
      source);
  answered.WaitForNotification();
  return status;
}

TEST(RlsSpanTest, ErrorsAndStoreFailuresMarkTheSpanAndUntracedCallsHaveNone) {
  std::unique_ptr<OtlpReceiver> receiver = OtlpReceiver::Start();
  ASSERT_NE(receiver, nullptr);
  TracingOptions tracing;
  tracing.enabled = true;
  tracing.endpoint = receiver->endpoint();
  tracing.flush_interval_ms = 50;
  absl::StatusOr<std::unique_ptr<Tracer>> tracer = Tracer::Start(tracing);
  ASSERT_TRUE(tracer.ok()) << tracer.status();

  RlsServiceOptions options;
  absl::StatusOr<EnvoyDomainConfig> config = ParseEnvoyConfig(
      "domain: tiffin\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, "
      "requests_per_unit: 3}\n",
      "tiffin.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  options.domains.push_back(*std::move(config));
  options.store = std::make_shared<FailingStore>();
  options.tracer = tracer->get();
  absl::StatusOr<std::unique_ptr<RlsService>> service = RlsService::Create(std::move(options));
  ASSERT_TRUE(service.ok()) << service.status();

  const RlsCallSource grpc{.api = RlsCallSource::Api::kGrpc, .traceparent = ""};
  const auto request = testing::MakeRateLimitRequest("tiffin", {{{"user", "alice"}}});
  EXPECT_EQ(Ask(**service, testing::MakeRateLimitRequest("", {{{"user", "alice"}}}), grpc).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Ask(**service, request, grpc).ok());  // answered OK: fail open
  EXPECT_TRUE(Ask(**service, request, {}).ok());    // untraced
  (*tracer)->Shutdown();                            // exports what is queued

  const auto spans = receiver->spans();
  ASSERT_EQ(spans.size(), 2u);
  const auto& failed = spans[0].span;
  EXPECT_EQ(failed.name(), kShouldRateLimitSpanName);
  EXPECT_EQ(failed.status().code(), Status::STATUS_CODE_ERROR);
  EXPECT_FALSE(failed.status().message().empty());
  EXPECT_EQ(AttributeText(failed.attributes(), "rpc.grpc.status_code"), "3");
  EXPECT_EQ(AttributeText(failed.attributes(), "ratelimit.overall_code"), "");
  const auto& fail_open = spans[1].span;
  EXPECT_EQ(fail_open.status().code(), Status::STATUS_CODE_ERROR);
  EXPECT_TRUE(absl::StrContains(fail_open.status().message(), "fail open"))
      << fail_open.status().message();
  EXPECT_EQ(AttributeText(fail_open.attributes(), "rpc.grpc.status_code"), "0");
  EXPECT_EQ(AttributeText(fail_open.attributes(), "ratelimit.overall_code"), "OK");
}

}  // namespace
}  // namespace tollgate::server
