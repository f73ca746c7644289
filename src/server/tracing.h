// Copyright tollgate authors. Tracing: which requests get a span, and where spans go.
//
//   auto tracer = Tracer::Start({.enabled = true, .endpoint = "http://collector:4318"});
//   std::optional<SpanRecord> span = (*tracer)->StartSpan(kName, traceparent_header);
//   if (span) { span->AddString("domain", ...); ... (*tracer)->End(*std::move(span)); }
//
// Sampling is OpenTelemetry's ParentBased(TraceIdRatioBased(sampling_rate)), as
// envoyproxy/ratelimit's: a request with a valid `traceparent` is sampled exactly when its
// sampled flag is set, and its span joins that trace as a child of the caller's span; a request
// without one (or with an invalid one, which is ignored) starts a trace, sampled by its trace id
// at `sampling_rate`. An unsampled request costs a header check and, at a rate between 0 and
// 1, one random trace id: no allocation, no lock. Spans are exported by an OtlpExporter
// (src/server/otlp_exporter.h) off the request path.
#ifndef TOLLGATE_SRC_SERVER_TRACING_H_
#define TOLLGATE_SRC_SERVER_TRACING_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "src/server/otlp_exporter.h"
#include "src/server/trace_span.h"
#include "tollgate/clock.h"

namespace tollgate::server {

// OpenTelemetry's default OTLP/HTTP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT's default).
inline constexpr char kDefaultOtlpEndpoint[] = "http://localhost:4318";

// `tollgate serve`'s tracing options (ServeOptions::tracing, src/cli/serve.h, which says how
// each maps to a flag and to envoyproxy/ratelimit's environment).
struct TracingOptions {
  // Off: no span is recorded, nothing is exported, no thread is started.
  bool enabled = false;
  // The collector's OTLP/HTTP base URL, http://HOST[:PORT][/PATH] (OTEL_EXPORTER_OTLP_ENDPOINT):
  // spans are POSTed to it with "/v1/traces" appended to its path.
  std::string endpoint = kDefaultOtlpEndpoint;
  // When set, the full URL spans are POSTed to, used as is
  // (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT); `endpoint` is then ignored.
  std::string traces_endpoint;
  // Resource attributes: service.name, service.namespace (left out when empty) and
  // service.instance.id (a random UUID, made at start, when empty).
  std::string service_name = "tollgate";
  std::string service_namespace;
  std::string service_instance_id;
  // The fraction of new traces sampled, 0..1 (requests with a traceparent follow its flag).
  double sampling_rate = 1.0;
  // The exporter's bounds (OtlpExporterOptions). flush_interval_ms is shorter than
  // OpenTelemetry's 5 s so a trace shows within a second; a batch holds at most
  // max_batch_spans anyway.
  int max_queue_spans = 2048;
  int max_batch_spans = 512;
  int64_t flush_interval_ms = 1000;
  int64_t export_timeout_ms = 10'000;
  int64_t shutdown_timeout_ms = 2'000;
};

// The URL spans are POSTed to: traces_endpoint as is, else endpoint with "/v1/traces" appended
// to its path (one '/' between them).
std::string OtlpTracesUrl(const TracingOptions& options);

// Thread-safe.
class Tracer {
 public:
  // Starts the exporter. InvalidArgument (naming the option) for a URL that is not
  // http://HOST[:PORT][/PATH], a sampling_rate outside 0..1, an empty service_name, or
  // exporter bounds OtlpExporter::Start refuses. REQUIRES: options.enabled; `clock` (nullptr:
  // SystemClock()) outlives the tracer.
  static absl::StatusOr<std::unique_ptr<Tracer>> Start(const TracingOptions& options,
                                                       Clock* clock = nullptr);

  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;
  ~Tracer();

  // A SERVER span named `name` (a literal) starting now, with fresh span id, when the request
  // is sampled (see the top of this file); nullopt when it is not. `traceparent`: the request's
  // header value, "" when it has none.
  std::optional<SpanRecord> StartSpan(std::string_view name, std::string_view traceparent) const;

  // Ends `span` now and queues it for export (OtlpExporter::Export: never waits).
  void End(SpanRecord span);

  // Exports what is queued within shutdown_timeout_ms, then stops (OtlpExporter::Shutdown).
  void Shutdown();

  TracingStats stats() const;
  // Where spans go (OtlpTracesUrl).
  const std::string& url() const { return url_; }
  double sampling_rate() const { return sampling_rate_; }

 private:
  Tracer(std::string url, double sampling_rate, Clock* clock,
         std::unique_ptr<OtlpExporter> exporter);
  int64_t NowUnixNanos() const;

  const std::string url_;
  const double sampling_rate_;
  Clock* const clock_;
  const std::unique_ptr<OtlpExporter> exporter_;
};

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_TRACING_H_
