// Copyright tollgate authors. OtlpExporter against a test collector
// (tests/support/otlp_receiver.h): batching, a dead and a black-holed collector, the queue's
// bound and shutdown's.
#include "src/server/otlp_exporter.h"

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "gtest/gtest.h"
#include "tests/support/otlp_receiver.h"
#include "tests/support/process.h"

namespace tollgate::server {
namespace {

using testing::OtlpReceiver;

constexpr auto kWait = std::chrono::seconds(30);

SpanRecord Span() {
  SpanRecord span;
  span.trace_id = NewTraceId();
  span.span_id = NewSpanId();
  span.name = "span";
  return span;
}

OtlpExporterOptions Options(std::string url, int max_batch_spans, int64_t flush_interval_ms) {
  OtlpExporterOptions options;
  options.url = std::move(url);
  options.max_batch_spans = max_batch_spans;
  options.flush_interval_ms = flush_interval_ms;
  return options;
}

// A collector that reads exports and never answers them.
std::unique_ptr<OtlpReceiver> SilentCollector() {
  std::unique_ptr<OtlpReceiver> receiver = OtlpReceiver::Start();
  if (receiver != nullptr) receiver->set_mode(OtlpReceiver::Mode::kBlackHole);
  return receiver;
}

// Waits (bounded) until `done(stats)` holds; the last stats.
template <typename Done>
TracingStats WaitForStats(const OtlpExporter& exporter, Done done) {
  const auto until = std::chrono::steady_clock::now() + kWait;
  TracingStats stats = exporter.stats();
  while (!done(stats) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    stats = exporter.stats();
  }
  return stats;
}

TEST(OtlpExporterTest, SpansGoInBatchesOfAtMostTheBatchSize) {
  std::unique_ptr<OtlpReceiver> receiver = OtlpReceiver::Start();
  ASSERT_NE(receiver, nullptr);
  absl::StatusOr<std::unique_ptr<OtlpExporter>> exporter =
      OtlpExporter::Start(Options(receiver->endpoint() + "/v1/traces", 10, 50));
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  for (int i = 0; i < 25; ++i) EXPECT_TRUE((*exporter)->Export(Span()));
  EXPECT_EQ(receiver->WaitForSpans(25, kWait).size(), 25u);
  EXPECT_GE(receiver->requests(), 3);
  const TracingStats stats =
      WaitForStats(**exporter, [](const TracingStats& s) { return s.spans_exported == 25; });
  EXPECT_EQ(stats.spans_exported, 25);
  EXPECT_EQ(stats.exports_succeeded, receiver->requests());
  EXPECT_EQ(stats.spans_dropped_queue_full + stats.spans_dropped_export_failed, 0);
}

TEST(OtlpExporterTest, ADeadCollectorsBatchesAreDroppedAndCounted) {
  absl::StatusOr<std::unique_ptr<OtlpExporter>> exporter = OtlpExporter::Start(
      Options("http://127.0.0.1:" + std::to_string(testing::FreePort()), 10, 50));
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  for (int i = 0; i < 100; ++i) EXPECT_TRUE((*exporter)->Export(Span()));
  const TracingStats stats = WaitForStats(
      **exporter, [](const TracingStats& s) { return s.spans_dropped_export_failed == 100; });
  EXPECT_EQ(stats.spans_dropped_export_failed, 100);
  EXPECT_GE(stats.exports_unreachable, 10);
  EXPECT_EQ(stats.queued_spans, 0);
}

TEST(OtlpExporterTest, WhileACollectorIsSilentTheQueueStaysBoundedAndTheTimeoutEndsTheExport) {
  std::unique_ptr<OtlpReceiver> receiver = SilentCollector();
  ASSERT_NE(receiver, nullptr);
  OtlpExporterOptions options = Options(receiver->endpoint() + "/v1/traces", 4, 10);
  options.max_queue_spans = 8;
  options.export_timeout_ms = 2000;
  absl::StatusOr<std::unique_ptr<OtlpExporter>> exporter = OtlpExporter::Start(options);
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  EXPECT_TRUE((*exporter)->Export(Span()));
  ASSERT_TRUE(receiver->WaitForRequests(1, kWait));  // held, unanswered
  int accepted = 0;
  for (int i = 0; i < 20; ++i) accepted += (*exporter)->Export(Span()) ? 1 : 0;
  EXPECT_LE(accepted, 8);
  TracingStats stats = (*exporter)->stats();
  EXPECT_LE(stats.queued_spans, 8);
  EXPECT_EQ(stats.spans_dropped_queue_full, 20 - accepted);
  stats = WaitForStats(**exporter, [](const TracingStats& s) { return s.exports_timed_out >= 1; });
  EXPECT_GE(stats.exports_timed_out, 1);
  EXPECT_GE(stats.spans_dropped_export_failed, 1);
  EXPECT_EQ(stats.spans_exported, 0);
}

TEST(OtlpExporterTest, ShutdownExportsWhatIsQueued) {
  std::unique_ptr<OtlpReceiver> receiver = OtlpReceiver::Start();
  ASSERT_NE(receiver, nullptr);
  absl::StatusOr<std::unique_ptr<OtlpExporter>> exporter =
      OtlpExporter::Start(Options(receiver->endpoint() + "/v1/traces", 512, 3'600'000));
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  for (int i = 0; i < 3; ++i) EXPECT_TRUE((*exporter)->Export(Span()));
  (*exporter)->Shutdown();
  EXPECT_EQ(receiver->spans().size(), 3u);
  EXPECT_EQ((*exporter)->stats().spans_exported, 3);
  // After Shutdown nothing is queued any more.
  EXPECT_FALSE((*exporter)->Export(Span()));
  (*exporter)->Shutdown();  // idempotent
}

// A collector that never answers holds Shutdown only up to its bound (the export in progress,
// whose own timeout is an hour, is cut short), and the spans not exported are counted.
TEST(OtlpExporterTest, ShutdownIsBoundedWhenTheCollectorIsSilent) {
  std::unique_ptr<OtlpReceiver> receiver = SilentCollector();
  ASSERT_NE(receiver, nullptr);
  OtlpExporterOptions options = Options(receiver->endpoint() + "/v1/traces", 2, 10);
  options.export_timeout_ms = 3'600'000;
  options.shutdown_timeout_ms = 100;
  absl::StatusOr<std::unique_ptr<OtlpExporter>> exporter = OtlpExporter::Start(options);
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  for (int i = 0; i < 2; ++i) EXPECT_TRUE((*exporter)->Export(Span()));
  ASSERT_TRUE(receiver->WaitForRequests(1, kWait));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE((*exporter)->Export(Span()));
  (*exporter)->Shutdown();
  const TracingStats stats = (*exporter)->stats();
  EXPECT_EQ(stats.spans_dropped_export_failed, 5);
  EXPECT_EQ(stats.queued_spans, 0);
}

}  // namespace
}  // namespace tollgate::server
