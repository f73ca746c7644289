// Copyright tollgate authors.
#include "src/server/http_post_client.h"

#include <chrono>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb.h"
#include "tests/support/otlp_receiver.h"
#include "tests/support/process.h"

namespace tollgate::server {
namespace {

using testing::OtlpReceiver;
using Result = HttpPostOutcome::Result;

TEST(HttpPostClientTest, UrlsAreSplit) {
  absl::StatusOr<HttpUrl> url = ParseHttpUrl("http://collector.observability:4318/v1/traces");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->host, "collector.observability");
  EXPECT_EQ(url->port, 4318);
  EXPECT_EQ(url->target, "/v1/traces");
  EXPECT_EQ(url->authority, "collector.observability:4318");

  url = ParseHttpUrl("HTTP://localhost");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->port, 80);
  EXPECT_EQ(url->target, "/");

  url = ParseHttpUrl("http://[::1]:4318/otlp/v1/traces?tenant=a");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->host, "::1");
  EXPECT_EQ(url->target, "/otlp/v1/traces?tenant=a");
  EXPECT_EQ(url->authority, "[::1]:4318");

  url = ParseHttpUrl("http://[::1]");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->host, "::1");
  EXPECT_EQ(url->port, 80);
}

TEST(HttpPostClientTest, OtherUrlsAreRefused) {
  for (const char* url : {"https://collector:4318", "grpc://collector:4317", "collector:4318",
                          "http://", "http://:4318", "http://collector:0", "http://collector:99999",
                          "http://collector:port", "http://user:secret@collector:4318",
                          "http://collector:4318/v1/traces#x", "http://::1:4318"}) {
    EXPECT_FALSE(ParseHttpUrl(url).ok()) << url;
  }
  EXPECT_NE(std::string(ParseHttpUrl("https://collector:4318").status().message()).find("https"),
            std::string::npos);
}

std::string EmptyExport() {
  return opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest()
      .SerializeAsString();
}

std::chrono::steady_clock::time_point In(std::chrono::milliseconds timeout) {
  return std::chrono::steady_clock::now() + timeout;
}

TEST(HttpPostClientTest, PostsAndReconnectsWhenTheServerClosedTheConnection) {
  std::unique_ptr<OtlpReceiver> receiver = OtlpReceiver::Start();
  ASSERT_NE(receiver, nullptr);
  const int port = receiver->port();
  HttpPostClient client(*ParseHttpUrl(receiver->endpoint() + "/v1/traces"));
  const auto timeout = std::chrono::seconds(30);
  EXPECT_EQ(client.Post(EmptyExport(), "application/x-protobuf", In(timeout)).result,
            Result::kSuccess);
  EXPECT_EQ(client.Post(EmptyExport(), "application/x-protobuf", In(timeout)).result,
            Result::kSuccess);
  // The kept connection dies with the receiver; a new one on the same port is reached anew.
  receiver.reset();
  receiver = OtlpReceiver::Start(port);
  ASSERT_NE(receiver, nullptr);
  EXPECT_EQ(client.Post(EmptyExport(), "application/x-protobuf", In(timeout)).result,
            Result::kSuccess);
  EXPECT_EQ(receiver->requests(), 1);

  const HttpPostOutcome wrong_type = client.Post(EmptyExport(), "text/plain", In(timeout));
  EXPECT_EQ(wrong_type.result, Result::kRejected);
  EXPECT_EQ(wrong_type.detail, "HTTP 400");
}

TEST(HttpPostClientTest, ARefusedOrSilentServerFailsByTheDeadline) {
  HttpPostClient refused(
      *ParseHttpUrl("http://127.0.0.1:" + std::to_string(testing::FreePort()) + "/v1/traces"));
  EXPECT_EQ(
      refused.Post(EmptyExport(), "application/x-protobuf", In(std::chrono::seconds(30))).result,
      Result::kUnreachable);

  std::unique_ptr<OtlpReceiver> receiver = OtlpReceiver::Start();
  ASSERT_NE(receiver, nullptr);
  receiver->set_mode(OtlpReceiver::Mode::kBlackHole);
  HttpPostClient silent(*ParseHttpUrl(receiver->endpoint() + "/v1/traces"));
  const HttpPostOutcome outcome =
      silent.Post(EmptyExport(), "application/x-protobuf", In(std::chrono::milliseconds(200)));
  EXPECT_EQ(outcome.result, Result::kTimeout) << outcome.detail;
  EXPECT_EQ(receiver->requests(), 1);
  // Aborted: this Post and the next end at once, whatever their deadline.
  silent.Abort();
  EXPECT_EQ(silent.Post(EmptyExport(), "application/x-protobuf", In(std::chrono::hours(1))).detail,
            "aborted");
}

}  // namespace
}  // namespace tollgate::server
