// Copyright tollgate authors.
#include "src/server/otlp_exporter.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "spdlog/spdlog.h"

namespace tollgate::server {
namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr std::string_view kProtobufContentType = "application/x-protobuf";

}  // namespace

absl::StatusOr<std::unique_ptr<OtlpExporter>> OtlpExporter::Start(OtlpExporterOptions options) {
  absl::StatusOr<HttpUrl> url = ParseHttpUrl(options.url);
  if (!url.ok()) return url.status();
  if (options.max_queue_spans < 1 || options.max_batch_spans < 1 ||
      options.max_batch_spans > options.max_queue_spans || options.flush_interval_ms < 1 ||
      options.export_timeout_ms < 1 || options.shutdown_timeout_ms < 0) {
    return absl::InvalidArgumentError(
        "tracing: queue, batch, flush interval and export timeout must be at least 1, and a "
        "batch at most the queue");
  }
  auto exporter =
      std::unique_ptr<OtlpExporter>(new OtlpExporter(std::move(options), *std::move(url)));
  exporter->thread_ = std::thread([raw = exporter.get()] { raw->Run(); });
  return exporter;
}

OtlpExporter::OtlpExporter(OtlpExporterOptions options, HttpUrl url)
    : options_(std::move(options)), client_(std::move(url)) {}

OtlpExporter::~OtlpExporter() { Shutdown(); }

bool OtlpExporter::Export(SpanRecord span) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_ && queue_.size() < static_cast<size_t>(options_.max_queue_spans)) {
      queue_.push_back(std::move(span));
      return true;
    }
  }
  spans_dropped_queue_full_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void OtlpExporter::Shutdown() {
  absl::MutexLock join_lock(&join_mu_);
  if (!thread_.joinable()) return;
  const auto bound = std::chrono::milliseconds(options_.shutdown_timeout_ms);
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    stop_deadline_ = SteadyClock::now() + bound;
  }
  // The thread exports what is queued, each export bounded by stop_deadline_; an export that
  // started earlier with a longer bound is cut short here.
  if (!exited_.WaitForNotificationWithTimeout(absl::FromChrono(bound))) client_.Abort();
  thread_.join();
}

void OtlpExporter::Run() {
  std::vector<SpanRecord> batch;
  const auto batch_size = static_cast<size_t>(options_.max_batch_spans);
  while (true) {
    SteadyClock::time_point stop_deadline = SteadyClock::time_point::max();  // when stopping
    {
      absl::MutexLock lock(&mu_);
      auto batch_ready = [this, batch_size]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || queue_.size() >= batch_size;
      };
      mu_.AwaitWithTimeout(absl::Condition(&batch_ready),
                           absl::Milliseconds(options_.flush_interval_ms));
      if (stopping_) {
        if (queue_.empty()) break;
        if (SteadyClock::now() >= stop_deadline_) {
          spans_dropped_export_failed_.fetch_add(static_cast<int64_t>(queue_.size()),
                                                 std::memory_order_relaxed);
          spdlog::warn("tracing: {} spans not exported by the shutdown bound ({} ms)",
                       queue_.size(), options_.shutdown_timeout_ms);
          queue_.clear();
          break;
        }
        stop_deadline = stop_deadline_;
      }
      const size_t take = std::min(batch_size, queue_.size());
      std::move(queue_.begin(), queue_.begin() + static_cast<ptrdiff_t>(take),
                std::back_inserter(batch));
      queue_.erase(queue_.begin(), queue_.begin() + static_cast<ptrdiff_t>(take));
    }
    if (batch.empty()) continue;
    const SteadyClock::time_point timeout =
        SteadyClock::now() + std::chrono::milliseconds(options_.export_timeout_ms);
    ExportBatch(batch, std::min(timeout, stop_deadline));
    batch.clear();
  }
  exited_.Notify();
}

void OtlpExporter::ExportBatch(const std::vector<SpanRecord>& batch,
                               SteadyClock::time_point deadline) {
  const auto count = static_cast<int64_t>(batch.size());
  const HttpPostOutcome outcome = client_.Post(EncodeExportTraceRequest(options_.resource, batch),
                                               kProtobufContentType, deadline);
  switch (outcome.result) {
    case HttpPostOutcome::Result::kSuccess:
      exports_succeeded_.fetch_add(1, std::memory_order_relaxed);
      spans_exported_.fetch_add(count, std::memory_order_relaxed);
      if (failing_) spdlog::info("tracing: exports to {} succeed again", options_.url);
      failing_ = false;
      return;
    case HttpPostOutcome::Result::kRejected:
      exports_rejected_.fetch_add(1, std::memory_order_relaxed);
      break;
    case HttpPostOutcome::Result::kTimeout:
      exports_timed_out_.fetch_add(1, std::memory_order_relaxed);
      break;
    case HttpPostOutcome::Result::kUnreachable:
      exports_unreachable_.fetch_add(1, std::memory_order_relaxed);
      break;
  }
  spans_dropped_export_failed_.fetch_add(count, std::memory_order_relaxed);
  if (!failing_) {
    spdlog::warn("tracing: exports to {} fail ({}); spans are dropped until it answers",
                 options_.url, outcome.detail);
  }
  failing_ = true;
}

TracingStats OtlpExporter::stats() const {
  TracingStats stats;
  stats.spans_exported = spans_exported_.load(std::memory_order_relaxed);
  stats.spans_dropped_queue_full = spans_dropped_queue_full_.load(std::memory_order_relaxed);
  stats.spans_dropped_export_failed = spans_dropped_export_failed_.load(std::memory_order_relaxed);
  stats.exports_succeeded = exports_succeeded_.load(std::memory_order_relaxed);
  stats.exports_rejected = exports_rejected_.load(std::memory_order_relaxed);
  stats.exports_timed_out = exports_timed_out_.load(std::memory_order_relaxed);
  stats.exports_unreachable = exports_unreachable_.load(std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  stats.queued_spans = static_cast<int64_t>(queue_.size());
  return stats;
}

}  // namespace tollgate::server
