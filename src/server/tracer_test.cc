// Copyright tollgate authors. Tracer: its options, its sampling rule, and its spans as a
// collector (tests/support/otlp_receiver.h) receives them.
#include <chrono>
#include <memory>
#include <regex>
#include <string>

#include "gtest/gtest.h"
#include "src/server/trace_context.h"
#include "src/server/tracing.h"
#include "tests/support/otlp_receiver.h"
#include "tollgate/clock.h"

namespace tollgate::server {
namespace {

using testing::AttributeText;
using testing::OtlpReceiver;

constexpr char kName[] = "test span";
constexpr char kTraceId[] = "4bf92f3577b34da6a3ce929d0e0e4736";
constexpr char kSpanId[] = "00f067aa0ba902b7";

TracingOptions Options(std::string endpoint, double rate = 1.0) {
  TracingOptions options;
  options.enabled = true;
  options.endpoint = std::move(endpoint);
  options.sampling_rate = rate;
  options.flush_interval_ms = 50;
  return options;
}

TEST(TracerTest, TheTracesUrlIsTheEndpointWithV1TracesOrTheTracesEndpointAsIs) {
  TracingOptions options;
  EXPECT_EQ(OtlpTracesUrl(options), "http://localhost:4318/v1/traces");
  options.endpoint = "http://collector:4318/";
  EXPECT_EQ(OtlpTracesUrl(options), "http://collector:4318/v1/traces");
  options.endpoint = "http://collector:4318/otlp";
  EXPECT_EQ(OtlpTracesUrl(options), "http://collector:4318/otlp/v1/traces");
  options.traces_endpoint = "http://other:9999/custom";
  EXPECT_EQ(OtlpTracesUrl(options), "http://other:9999/custom");
}

TEST(TracerTest, BadOptionsAreRefusedAtStart) {
  EXPECT_FALSE(Tracer::Start(Options("https://collector:4318")).ok());
  EXPECT_FALSE(Tracer::Start(Options("collector:4318")).ok());
  EXPECT_FALSE(Tracer::Start(Options("http://127.0.0.1:4318", 1.5)).ok());
  EXPECT_FALSE(Tracer::Start(Options("http://127.0.0.1:4318", -0.1)).ok());
  TracingOptions unnamed = Options("http://127.0.0.1:4318");
  unnamed.service_name = "";
  EXPECT_FALSE(Tracer::Start(unnamed).ok());
  TracingOptions batch_over_queue = Options("http://127.0.0.1:4318");
  batch_over_queue.max_batch_spans = batch_over_queue.max_queue_spans + 1;
  EXPECT_FALSE(Tracer::Start(batch_over_queue).ok());
}

TEST(TracerTest, AParentDecidesAndTheRateDecidesWithoutOne) {
  SimulatedClock clock;
  const std::string sampled = std::string("00-") + kTraceId + "-" + kSpanId + "-01";
  const std::string unsampled = std::string("00-") + kTraceId + "-" + kSpanId + "-00";
  const std::string invalid = std::string("00-") + kTraceId + "-" + kSpanId + "-0";

  absl::StatusOr<std::unique_ptr<Tracer>> never =
      Tracer::Start(Options("http://127.0.0.1:9", 0), &clock);
  ASSERT_TRUE(never.ok()) << never.status();
  EXPECT_FALSE((*never)->StartSpan(kName, "").has_value());
  EXPECT_FALSE((*never)->StartSpan(kName, invalid).has_value());
  EXPECT_FALSE((*never)->StartSpan(kName, unsampled).has_value());
  std::optional<SpanRecord> child = (*never)->StartSpan(kName, sampled);
  ASSERT_TRUE(child.has_value());
  EXPECT_EQ(HexId(child->trace_id), kTraceId);
  EXPECT_EQ(HexId(child->parent_span_id), kSpanId);
  EXPECT_NE(HexId(child->span_id), kSpanId);
  EXPECT_TRUE(child->remote_parent);
  EXPECT_EQ(child->kind, SpanKind::kServer);
  EXPECT_EQ(child->start_unix_nanos, clock.NowMicros() * 1000);

  absl::StatusOr<std::unique_ptr<Tracer>> always =
      Tracer::Start(Options("http://127.0.0.1:9", 1), &clock);
  ASSERT_TRUE(always.ok()) << always.status();
  EXPECT_FALSE((*always)->StartSpan(kName, unsampled).has_value());
  std::optional<SpanRecord> root = (*always)->StartSpan(kName, invalid);
  ASSERT_TRUE(root.has_value());
  EXPECT_FALSE(root->remote_parent);
  EXPECT_EQ(HexId(root->parent_span_id), std::string(16, '0'));
  EXPECT_NE(HexId(root->trace_id), kTraceId);
}

TEST(TracerTest, EndedSpansReachTheCollectorWithTheResource) {
  std::unique_ptr<OtlpReceiver> receiver = OtlpReceiver::Start();
  ASSERT_NE(receiver, nullptr);
  SimulatedClock clock;
  absl::StatusOr<std::unique_ptr<Tracer>> tracer =
      Tracer::Start(Options(receiver->endpoint()), &clock);
  ASSERT_TRUE(tracer.ok()) << tracer.status();
  EXPECT_EQ((*tracer)->url(), receiver->endpoint() + "/v1/traces");
  std::optional<SpanRecord> span = (*tracer)->StartSpan(kName, "");
  ASSERT_TRUE(span.has_value());
  clock.AdvanceMicros(250);
  (*tracer)->End(*std::move(span));
  const auto spans = receiver->WaitForSpans(1, std::chrono::seconds(30));
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].span.name(), kName);
  EXPECT_EQ(spans[0].span.end_time_unix_nano() - spans[0].span.start_time_unix_nano(), 250'000u);
  const auto& resource = spans[0].resource.attributes();
  EXPECT_EQ(AttributeText(resource, "service.name"), "tollgate");
  EXPECT_EQ(AttributeText(resource, "service.namespace"), "");  // left out when empty
  // No instance id given: a random UUID, as envoyproxy/ratelimit makes one.
  EXPECT_TRUE(std::regex_match(AttributeText(resource, "service.instance.id"),
                               std::regex("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-"
                                          "[0-9a-f]{12}")))
      << AttributeText(resource, "service.instance.id");
}

}  // namespace
}  // namespace tollgate::server
