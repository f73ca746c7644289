// Copyright tollgate authors.
#include "src/server/tracing.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "src/core/build_info.h"
#include "src/server/trace_context.h"

namespace tollgate::server {
namespace {

// A random (version 4) UUID in its 8-4-4-4-12 text form, as envoyproxy/ratelimit makes
// service.instance.id when none is given.
std::string RandomUuid() {
  TraceId bytes = NewTraceId();
  bytes[6] = static_cast<uint8_t>((bytes[6] & 0x0f) | 0x40);  // version 4
  bytes[8] = static_cast<uint8_t>((bytes[8] & 0x3f) | 0x80);  // RFC 4122 variant
  const std::string hex = HexId(bytes);
  return absl::StrCat(hex.substr(0, 8), "-", hex.substr(8, 4), "-", hex.substr(12, 4), "-",
                      hex.substr(16, 4), "-", hex.substr(20));
}

OtlpResource MakeResource(const TracingOptions& options) {
  OtlpResource resource;
  resource.attributes.emplace_back("service.name", options.service_name);
  if (!options.service_namespace.empty()) {
    resource.attributes.emplace_back("service.namespace", options.service_namespace);
  }
  resource.attributes.emplace_back("service.instance.id", options.service_instance_id.empty()
                                                              ? RandomUuid()
                                                              : options.service_instance_id);
  resource.attributes.emplace_back("service.version", kBuildVersion);
  resource.attributes.emplace_back("telemetry.sdk.name", "tollgate");
  resource.attributes.emplace_back("telemetry.sdk.language", "cpp");
  resource.scope_name = "tollgate";
  resource.scope_version = kBuildVersion;
  return resource;
}

}  // namespace

std::string OtlpTracesUrl(const TracingOptions& options) {
  if (!options.traces_endpoint.empty()) return options.traces_endpoint;
  std::string url = options.endpoint;
  if (url.empty() || url.back() != '/') url += '/';
  return url + "v1/traces";
}

absl::StatusOr<std::unique_ptr<Tracer>> Tracer::Start(const TracingOptions& options, Clock* clock) {
  if (!(options.sampling_rate >= 0 && options.sampling_rate <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tracing: sampling rate ", options.sampling_rate, " is not within 0..1"));
  }
  if (options.service_name.empty()) {
    return absl::InvalidArgumentError("tracing: the service name is empty");
  }
  std::string url = OtlpTracesUrl(options);
  absl::StatusOr<std::unique_ptr<OtlpExporter>> exporter =
      OtlpExporter::Start({.url = url,
                           .resource = MakeResource(options),
                           .max_queue_spans = options.max_queue_spans,
                           .max_batch_spans = options.max_batch_spans,
                           .flush_interval_ms = options.flush_interval_ms,
                           .export_timeout_ms = options.export_timeout_ms,
                           .shutdown_timeout_ms = options.shutdown_timeout_ms});
  if (!exporter.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tracing endpoint: ", exporter.status().message()));
  }
  return std::unique_ptr<Tracer>(new Tracer(std::move(url), options.sampling_rate,
                                            clock != nullptr ? clock : &SystemClock(),
                                            *std::move(exporter)));
}

Tracer::Tracer(std::string url, double sampling_rate, Clock* clock,
               std::unique_ptr<OtlpExporter> exporter)
    : url_(std::move(url)),
      sampling_rate_(sampling_rate),
      clock_(clock),
      exporter_(std::move(exporter)) {}

Tracer::~Tracer() { Shutdown(); }

int64_t Tracer::NowUnixNanos() const { return clock_->NowMicros() * 1000; }

std::optional<SpanRecord> Tracer::StartSpan(std::string_view name,
                                            std::string_view traceparent) const {
  std::optional<TraceParent> parent;
  if (!traceparent.empty()) parent = ParseTraceParent(traceparent);
  TraceId trace_id;
  if (parent.has_value()) {
    if (!parent->sampled()) return std::nullopt;
    trace_id = parent->trace_id;
  } else {
    if (sampling_rate_ <= 0) return std::nullopt;  // before drawing an id
    trace_id = NewTraceId();
    if (!TraceIdRatioSampled(trace_id, sampling_rate_)) return std::nullopt;
  }
  std::optional<SpanRecord> span(std::in_place);
  span->trace_id = trace_id;
  span->span_id = NewSpanId();
  if (parent.has_value()) {
    span->parent_span_id = parent->span_id;
    span->remote_parent = true;
    span->trace_flags = parent->flags;
  }
  span->name = name;
  span->kind = SpanKind::kServer;
  span->start_unix_nanos = NowUnixNanos();
  return span;
}

void Tracer::End(SpanRecord span) {
  span.end_unix_nanos = NowUnixNanos();
  exporter_->Export(std::move(span));
}

void Tracer::Shutdown() { exporter_->Shutdown(); }

TracingStats Tracer::stats() const { return exporter_->stats(); }

}  // namespace tollgate::server
