// Copyright tollgate authors. Spans as OTLP's ExportTraceServiceRequest
// (opentelemetry/proto/collector/trace/v1/trace_service.proto, written for tollgate under
// proto/): what the exporter POSTs to a collector's /v1/traces as application/x-protobuf.
// Built as protobuf's generated messages and serialized, on the exporter's thread.
// Thread-safe (no state).
#ifndef TOLLGATE_SRC_SERVER_OTLP_ENCODING_H_
#define TOLLGATE_SRC_SERVER_OTLP_ENCODING_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "src/server/trace_span.h"

namespace tollgate::server {

// What every span of the process shares: the resource (service.name, ...) and the
// instrumentation scope that recorded the spans.
struct OtlpResource {
  // String attributes, in order (OTLP Resource.attributes).
  std::vector<std::pair<std::string, std::string>> attributes;
  std::string scope_name = "tollgate";
  std::string scope_version;
};

// One ExportTraceServiceRequest, serialized: one ResourceSpans with `resource`, one ScopeSpans
// holding `spans` in order. Each span's flags carry its trace flags, and say whether its
// parent is remote (bits 8 and 9); a root span has no parent_span_id; kUnset status is left
// out.
std::string EncodeExportTraceRequest(const OtlpResource& resource,
                                     absl::Span<const SpanRecord> spans);

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_OTLP_ENCODING_H_
