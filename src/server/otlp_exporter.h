// Copyright tollgate authors. Exports spans to an OpenTelemetry collector over OTLP/HTTP
// (protobuf), batched on a thread of its own, so that recording a span never waits for the
// network:
//
//   request path:  Export(span)  -> a bounded queue (full: the span is dropped and counted)
//   export thread: every flush_interval_ms, or as soon as max_batch_spans are queued, takes up
//                  to max_batch_spans, encodes one ExportTraceServiceRequest
//                  (src/server/otlp_encoding.h) and POSTs it (src/server/http_post_client.h)
//                  within export_timeout_ms.
//
// A batch that fails (refused, reset, timed out, answered other than 2xx) is dropped and
// counted, never retried: a dead or black-holed collector costs the export thread its
// timeouts and the request path nothing, and memory stays bounded by max_queue_spans queued
// spans plus one batch in flight. Each change between exports succeeding and failing is
// logged once (not each batch).
#ifndef TOLLGATE_SRC_SERVER_OTLP_EXPORTER_H_
#define TOLLGATE_SRC_SERVER_OTLP_EXPORTER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "src/server/http_post_client.h"
#include "src/server/otlp_encoding.h"
#include "src/server/trace_span.h"

namespace tollgate::server {

struct OtlpExporterOptions {
  // Where batches are POSTed, used as is ("http://HOST:PORT/v1/traces").
  std::string url;
  OtlpResource resource;
  // Spans waiting for export; beyond it a span is dropped (counted as queue_full).
  int max_queue_spans = 2048;
  // Spans in one export request.
  int max_batch_spans = 512;
  // Longest a span waits in the queue before a (possibly partial) batch is sent.
  int64_t flush_interval_ms = 1000;
  // One export, name resolution and connect included; past it the batch is dropped.
  int64_t export_timeout_ms = 10'000;
  // Shutdown's bound on exporting what is queued; the rest is dropped.
  int64_t shutdown_timeout_ms = 2'000;
};

// Totals since start (tollgate_tracing_* in /metrics).
struct TracingStats {
  int64_t spans_exported = 0;
  int64_t spans_dropped_queue_full = 0;
  int64_t spans_dropped_export_failed = 0;
  // Export requests by how they ended (HttpPostOutcome::Result).
  int64_t exports_succeeded = 0;
  int64_t exports_rejected = 0;
  int64_t exports_timed_out = 0;
  int64_t exports_unreachable = 0;
  // Spans queued now (at most max_queue_spans).
  int64_t queued_spans = 0;
};

// Thread-safe.
class OtlpExporter {
 public:
  // Starts the export thread. InvalidArgument for a URL ParseHttpUrl refuses or a bound below
  // 1 (max_batch_spans above max_queue_spans included).
  static absl::StatusOr<std::unique_ptr<OtlpExporter>> Start(OtlpExporterOptions options);

  OtlpExporter(const OtlpExporter&) = delete;
  OtlpExporter& operator=(const OtlpExporter&) = delete;
  // Shutdown().
  ~OtlpExporter();

  // Queues `span`. Never waits for I/O: takes a lock held by others only to push a span or to
  // take a batch. False when the span was dropped: the queue is full, or Shutdown has begun
  // (both counted as queue_full).
  bool Export(SpanRecord span);

  // Exports what is queued within shutdown_timeout_ms (an export in progress past it is cut
  // short), drops the rest (counted as export_failed), and joins the thread. Idempotent.
  void Shutdown();

  TracingStats stats() const;

 private:
  OtlpExporter(OtlpExporterOptions options, HttpUrl url);
  void Run();
  // POSTs `batch`; counts and logs the outcome.
  void ExportBatch(const std::vector<SpanRecord>& batch,
                   std::chrono::steady_clock::time_point deadline);

  const OtlpExporterOptions options_;
  HttpPostClient client_;  // used by the export thread only (Abort by Shutdown)

  mutable absl::Mutex mu_;
  std::deque<SpanRecord> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point stop_deadline_ ABSL_GUARDED_BY(mu_);

  std::atomic<int64_t> spans_exported_{0};
  std::atomic<int64_t> spans_dropped_queue_full_{0};
  std::atomic<int64_t> spans_dropped_export_failed_{0};
  std::atomic<int64_t> exports_succeeded_{0};
  std::atomic<int64_t> exports_rejected_{0};
  std::atomic<int64_t> exports_timed_out_{0};
  std::atomic<int64_t> exports_unreachable_{0};
  bool failing_ = false;  // export thread only: the last export failed (for the log)

  absl::Notification exited_;
  absl::Mutex join_mu_;  // one Shutdown joins
  std::thread thread_;
};

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_OTLP_EXPORTER_H_
