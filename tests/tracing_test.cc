// Copyright tollgate authors. Tracing end to end (docs/operations.md, "Tracing"): a real
// `tollgate serve --tracing-endpoint` called over gRPC (grpc++) and POST /json, exporting to a
// test OTLP/HTTP collector (tests/support/otlp_receiver.h): what a span holds, how a
// traceparent parents and samples it, and that a dead or black-holed collector neither stops
// nor slows the answers, nor grows the server's memory, and that spans flow again once the
// collector is back.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "src/server/trace_context.h"
#include "tests/support/otlp_receiver.h"
#include "tests/support/process.h"
#include "tests/support/rls_requests.h"
#include "tests/support/serve_process.h"

namespace tollgate {
namespace {

namespace http = boost::beast::http;
using ::envoy::service::ratelimit::v3::RateLimitRequest;
using ::envoy::service::ratelimit::v3::RateLimitResponse;
using ::envoy::service::ratelimit::v3::RateLimitService;
using ::testing::ElementsAre;
using ::tollgate::testing::AttributeStrings;
using ::tollgate::testing::AttributeText;
using ::tollgate::testing::OtlpReceiver;
using ::tollgate::testing::ReceivedSpan;
using ::tollgate::testing::ServeProcess;
using Span = opentelemetry::proto::trace::v1::Span;

constexpr char kConfig[] = R"(domain: tiffin
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    descriptors:
      - key: method
        rate_limit: {unit: second, requests_per_unit: 1000000}
)";

constexpr auto kWait = std::chrono::seconds(60);
constexpr char kGrpcSpanName[] = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

RateLimitRequest Request(const std::vector<testing::DescriptorEntries>& descriptors) {
  return testing::MakeRateLimitRequest("tiffin", descriptors);
}

// An id's bytes as lower-case hex.
std::string Hex(const std::string& bytes) {
  return server::HexId({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
}

// The server's resident memory (VmRSS), in kB; 0 when unreadable.
int64_t ResidentKilobytes(pid_t pid) {
  const std::string status = testing::ReadFileText(absl::StrCat("/proc/", pid, "/status"));
  const size_t at = status.find("VmRSS:");
  return at == std::string::npos ? 0 : std::stoll(status.substr(at + 6));
}

class TracingTest : public ::testing::Test {
 protected:
  // Starts the server exporting to `endpoint`, with `extra` flags. Under AddressSanitizer,
  // freed memory waits in a quarantine (256 MB by default) before it is reused, which would
  // hide whether memory stays bounded: it is kept small here.
  void StartServer(const std::string& endpoint, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--tracing-endpoint", endpoint};
    args.insert(args.end(), extra.begin(), extra.end());
    const char* asan = std::getenv("ASAN_OPTIONS");
    server_ = ServeProcess::Start(
        kConfig, args,
        {absl::StrCat("ASAN_OPTIONS=", asan != nullptr ? asan : "", ":quarantine_size_mb=4")});
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(server_->grpc_port(), 0) << server_->log();
    stub_ = NewStub();
  }

  std::unique_ptr<RateLimitService::Stub> NewStub() const {
    return RateLimitService::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", server_->grpc_port()), grpc::InsecureChannelCredentials()));
  }

  static grpc::Status Call(RateLimitService::Stub& stub, const RateLimitRequest& request,
                           RateLimitResponse* response, const std::string& traceparent = "") {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    if (!traceparent.empty()) context.AddMetadata("traceparent", traceparent);
    return stub.ShouldRateLimit(&context, request, response);
  }

  RateLimitResponse::Code Ask(const RateLimitRequest& request,
                              const std::string& traceparent = "") {
    RateLimitResponse response;
    const grpc::Status status = Call(*stub_, request, &response, traceparent);
    EXPECT_TRUE(status.ok()) << status.error_message() << "\n" << server_->log();
    return response.overall_code();
  }

  // `calls` calls from `threads` clients at once; returns how many were answered OK.
  int CallMany(int calls, int threads) {
    std::atomic<int> answered{0};
    std::vector<std::thread> clients;
    for (int t = 0; t < threads; ++t) {
      clients.emplace_back([&, t] {
        std::unique_ptr<RateLimitService::Stub> stub = NewStub();
        for (int i = t; i < calls; i += threads) {
          RateLimitResponse response;
          const RateLimitRequest request =
              Request({{{"path", absl::StrCat("/p/", i)}, {"method", "GET"}}});
          if (Call(*stub, request, &response).ok() &&
              response.overall_code() == RateLimitResponse::OK) {
            answered.fetch_add(1);
          }
        }
      });
    }
    for (std::thread& client : clients) client.join();
    return answered.load();
  }

  int64_t Metric(std::string_view series) const {
    return testing::MetricValue(testing::ScrapeMetrics(server_->port()), series);
  }

  // Waits (bounded) until `series` is at least `at_least`; its last value.
  int64_t WaitForMetric(std::string_view series, int64_t at_least) const {
    const auto until = std::chrono::steady_clock::now() + kWait;
    int64_t value = Metric(series);
    while (value < at_least && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      value = Metric(series);
    }
    return value;
  }

  // Waits (bounded) until the server's log holds `text`.
  bool WaitForLog(std::string_view text) const {
    const auto until = std::chrono::steady_clock::now() + kWait;
    while (!absl::StrContains(server_->log(), absl::string_view(text.data(), text.size()))) {
      if (std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return true;
  }

  std::unique_ptr<ServeProcess> server_;
  std::unique_ptr<RateLimitService::Stub> stub_;
};

TEST_F(TracingTest, SpansCarryTheCallItsDecisionAndTheResourceButNoValues) {
  std::unique_ptr<OtlpReceiver> receiver = OtlpReceiver::Start();
  ASSERT_NE(receiver, nullptr);
  StartServer(receiver->endpoint(),
              {"--tracing-service-name", "envoy-ratelimit", "--tracing-service-namespace",
               "envoy-gateway-system", "--tracing-service-instance-id", "ratelimit-7d9f-x2k4q"});
  EXPECT_TRUE(absl::StrContains(
      server_->log(),
      absl::StrCat("tracing: exporting to ", receiver->endpoint(), "/v1/traces, sampling 1")))
      << server_->log();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Ask(Request({{{"user", "alice"}}})), RateLimitResponse::OK);
  EXPECT_EQ(Ask(Request({{{"user", "alice"}}, {{"path", "/a"}, {"method", "GET"}}})),
            RateLimitResponse::OVER_LIMIT);
  testing::HttpTestClient http_client(server_->port());
  std::optional<testing::HttpTestResponse> json = http_client.Send(
      http::verb::post, "/json",
      R"({"domain": "tiffin", "descriptors": [{"entries": [{"key": "user", "value": "bob"}]}]})");
  ASSERT_TRUE(json.has_value());
  EXPECT_EQ(json->result_int(), 200);

  const std::vector<ReceivedSpan> spans = receiver->WaitForSpans(5, kWait);
  ASSERT_EQ(spans.size(), 5u) << server_->log();
  EXPECT_EQ(receiver->bad_requests(), 0);
  for (size_t i = 0; i < spans.size(); ++i) {
    const Span& span = spans[i].span;
    SCOPED_TRACE(i);
    EXPECT_EQ(span.kind(), Span::SPAN_KIND_SERVER);
    EXPECT_EQ(span.trace_id().size(), 16u);
    EXPECT_EQ(span.span_id().size(), 8u);
    EXPECT_TRUE(span.parent_span_id().empty());  // no traceparent: a root
    EXPECT_GT(span.start_time_unix_nano(), 0u);
    EXPECT_LE(span.start_time_unix_nano(), span.end_time_unix_nano());
    EXPECT_EQ(AttributeText(span.attributes(), "domain"), "tiffin");
    // Descriptor values (user ids) are never recorded.
    for (const auto& attribute : span.attributes()) {
      EXPECT_FALSE(absl::StrContains(attribute.value().DebugString(), "alice"));
      EXPECT_FALSE(absl::StrContains(attribute.value().DebugString(), "bob"));
    }
    const auto& resource = spans[i].resource.attributes();
    EXPECT_EQ(AttributeText(resource, "service.name"), "envoy-ratelimit");
    EXPECT_EQ(AttributeText(resource, "service.namespace"), "envoy-gateway-system");
    EXPECT_EQ(AttributeText(resource, "service.instance.id"), "ratelimit-7d9f-x2k4q");
    EXPECT_EQ(spans[i].scope.name(), "tollgate");
  }
  for (size_t i = 0; i < 4; ++i) {
    const Span& span = spans[i].span;
    SCOPED_TRACE(i);
    EXPECT_EQ(span.name(), kGrpcSpanName);
    EXPECT_EQ(AttributeText(span.attributes(), "rpc.system"), "grpc");
    EXPECT_EQ(AttributeText(span.attributes(), "rpc.service"),
              "envoy.service.ratelimit.v3.RateLimitService");
    EXPECT_EQ(AttributeText(span.attributes(), "rpc.method"), "ShouldRateLimit");
    EXPECT_EQ(AttributeText(span.attributes(), "rpc.grpc.status_code"), "0");
    EXPECT_EQ(span.status().code(), opentelemetry::proto::trace::v1::Status::STATUS_CODE_UNSET);
  }
  EXPECT_THAT(AttributeStrings(spans[0].span.attributes(), "ratelimit.descriptor_keys"),
              ElementsAre("user"));
  EXPECT_EQ(AttributeText(spans[2].span.attributes(), "ratelimit.overall_code"), "OK");
  EXPECT_EQ(AttributeText(spans[2].span.attributes(), "ratelimit.over_limit_descriptors"), "0");
  EXPECT_THAT(AttributeStrings(spans[3].span.attributes(), "ratelimit.descriptor_keys"),
              ElementsAre("user", "path,method"));
  EXPECT_EQ(AttributeText(spans[3].span.attributes(), "ratelimit.overall_code"), "OVER_LIMIT");
  EXPECT_EQ(AttributeText(spans[3].span.attributes(), "ratelimit.over_limit_descriptors"), "1");
  EXPECT_NE(spans[0].span.trace_id(), spans[1].span.trace_id());
  const Span& json_span = spans[4].span;
  EXPECT_EQ(json_span.name(), "POST /json");
  EXPECT_EQ(AttributeText(json_span.attributes(), "url.path"), "/json");
  EXPECT_EQ(AttributeText(json_span.attributes(), "rpc.system"), "");
  EXPECT_EQ(AttributeText(json_span.attributes(), "ratelimit.overall_code"), "OK");

  EXPECT_EQ(WaitForMetric("tollgate_tracing_spans_exported_total", 5), 5);
  EXPECT_GE(Metric("tollgate_tracing_exports_total{result=\"success\"}"), 1);
  EXPECT_EQ(Metric("tollgate_tracing_spans_dropped_total{reason=\"queue_full\"}"), 0);
  EXPECT_EQ(Metric("tollgate_tracing_spans_dropped_total{reason=\"export_failed\"}"), 0);
}

// A traceparent decides (its sampled flag) and parents; without one, or with an invalid one,
// the sampling rate decides (0 here: nothing). What is queued is exported at shutdown.
TEST_F(TracingTest, ASampledTraceparentParentsTheSpanAndTheRateDecidesTheRest) {
  std::unique_ptr<OtlpReceiver> receiver = OtlpReceiver::Start();
  ASSERT_NE(receiver, nullptr);
  StartServer(receiver->endpoint(), {"--tracing-sampling-rate", "0"});
  const std::string trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  const std::string parent_id = "00f067aa0ba902b7";
  EXPECT_EQ(Ask(Request({{{"user", "a"}}})), RateLimitResponse::OK);
  EXPECT_EQ(Ask(Request({{{"user", "b"}}}), "00-" + trace_id + "-" + parent_id + "-00"),
            RateLimitResponse::OK);
  EXPECT_EQ(
      Ask(Request({{{"user", "c"}}}), "00-00000000000000000000000000000000-" + parent_id + "-01"),
      RateLimitResponse::OK);
  EXPECT_EQ(Ask(Request({{{"user", "d"}}}), "00-" + trace_id + "-" + parent_id + "-01"),
            RateLimitResponse::OK);
  EXPECT_EQ(server_->Stop(), 0);  // exports what is queued first

  const std::vector<ReceivedSpan> spans = receiver->spans();
  ASSERT_EQ(spans.size(), 1u) << server_->log();
  const Span& span = spans[0].span;
  EXPECT_EQ(Hex(span.trace_id()), trace_id);
  EXPECT_EQ(Hex(span.parent_span_id()), parent_id);
  EXPECT_NE(Hex(span.span_id()), parent_id);
  EXPECT_EQ(span.flags() & 0x3ff, 0x301u);  // sampled, and the parent is known to be remote
}

// A collector whose port is closed: every call is answered, spans are dropped and counted,
// memory stays bounded; once a collector listens there, spans arrive again.
TEST_F(TracingTest, ADeadCollectorCostsTheCallsNothingUntilItComesBack) {
  const int port = testing::FreePort();
  const std::string endpoint = absl::StrCat("http://127.0.0.1:", port);
  StartServer(endpoint);
  ASSERT_EQ(CallMany(300, 4), 300);  // warm-up: every allocator pool in use
  const int64_t rss_before = ResidentKilobytes(server_->pid());
  ASSERT_EQ(CallMany(5000, 4), 5000);
  const int64_t rss_after = ResidentKilobytes(server_->pid());
  EXPECT_LT(rss_after - rss_before, 48 * 1024) << rss_before << " kB -> " << rss_after << " kB";
  EXPECT_TRUE(WaitForLog(absl::StrCat("tracing: exports to ", endpoint, "/v1/traces fail")))
      << server_->log();
  EXPECT_GT(WaitForMetric("tollgate_tracing_spans_dropped_total{reason=\"export_failed\"}", 1), 0);
  EXPECT_GT(Metric("tollgate_tracing_exports_total{result=\"unreachable\"}"), 0);
  EXPECT_LE(Metric("tollgate_tracing_queued_spans"), 2048);

  std::unique_ptr<OtlpReceiver> receiver = OtlpReceiver::Start(port);
  ASSERT_NE(receiver, nullptr);
  ASSERT_EQ(CallMany(20, 1), 20);
  EXPECT_FALSE(receiver->WaitForSpans(20, kWait).empty());
  EXPECT_TRUE(WaitForLog("succeed again")) << server_->log();
}

// A collector that accepts and never answers: every call is answered while the exporter waits
// for it, the queue stays at its bound and what overflows is dropped and counted, memory stays
// bounded; once it answers again, spans arrive.
TEST_F(TracingTest, ABlackHoledCollectorCostsTheCallsNothingUntilItAnswers) {
  std::unique_ptr<OtlpReceiver> receiver = OtlpReceiver::Start();
  ASSERT_NE(receiver, nullptr);
  receiver->set_mode(OtlpReceiver::Mode::kBlackHole);
  StartServer(receiver->endpoint());
  ASSERT_EQ(CallMany(300, 4), 300);
  ASSERT_TRUE(receiver->WaitForRequests(1, kWait));  // the first export is held
  const int64_t rss_before = ResidentKilobytes(server_->pid());
  // While an export is held (up to its 10 s timeout) the queue fills; calls go on until
  // spans overflow it (bounded).
  int calls = 0;
  int answered = 0;
  int64_t overflowed = 0;
  for (int round = 0; round < 40 && overflowed == 0; ++round) {
    answered += CallMany(1000, 4);
    calls += 1000;
    EXPECT_LE(Metric("tollgate_tracing_queued_spans"), 2048);
    overflowed = Metric("tollgate_tracing_spans_dropped_total{reason=\"queue_full\"}");
  }
  EXPECT_EQ(answered, calls);
  EXPECT_GT(overflowed, 0);
  const int64_t rss_after = ResidentKilobytes(server_->pid());
  EXPECT_LT(rss_after - rss_before, 48 * 1024) << rss_before << " kB -> " << rss_after << " kB";
  EXPECT_EQ(receiver->spans().size(), 0u);

  receiver->set_mode(OtlpReceiver::Mode::kAnswer);
  ASSERT_EQ(CallMany(20, 1), 20);
  EXPECT_FALSE(receiver->WaitForSpans(1, kWait).empty());
  EXPECT_TRUE(WaitForLog("succeed again")) << server_->log();
}

}  // namespace
}  // namespace tollgate
