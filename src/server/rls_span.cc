// Copyright tollgate authors.
#include "src/server/rls_span.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/server/rls_render.h"

namespace tollgate::server {

RlsSpan::RlsSpan(Tracer* tracer, const RlsCallSource& source, const RateLimitRequest& request) {
  if (tracer == nullptr || source.api == RlsCallSource::Api::kUntraced) return;
  grpc_ = source.api == RlsCallSource::Api::kGrpc;
  std::optional<SpanRecord> started =
      tracer->StartSpan(grpc_ ? kShouldRateLimitSpanName : kJsonSpanName,
                        grpc_ ? source.traceparent : std::string_view());
  if (!started.has_value()) return;
  tracer_ = tracer;
  span_ = std::make_unique<SpanRecord>(*std::move(started));
  SpanRecord& span = *span_;
  span.attributes.reserve(10);
  if (grpc_) {
    span.AddLiteral("rpc.system", "grpc");
    span.AddLiteral("rpc.service", "envoy.service.ratelimit.v3.RateLimitService");
    span.AddLiteral("rpc.method", "ShouldRateLimit");
  } else {
    span.AddLiteral("http.request.method", "POST");
    span.AddLiteral("url.path", "/json");
  }
  span.AddString("domain", request.domain());
  std::vector<std::string> keys;
  keys.reserve(std::min(static_cast<size_t>(request.descriptors_size()), kMaxAttributeArrayValues));
  for (const auto& descriptor : request.descriptors()) {
    if (keys.size() == kMaxAttributeArrayValues) break;
    std::string& joined = keys.emplace_back();
    for (const auto& entry : descriptor.entries()) {
      if (!joined.empty()) joined += ',';
      joined += entry.key();
    }
  }
  span.AddStrings("ratelimit.descriptor_keys", std::move(keys));
}

void RlsSpan::StoreFailed(const absl::Status& error) {
  if (span_ == nullptr) return;
  span_->SetError(absl::StrCat("store failed, answered OK (fail open): ", error.message()));
}

void RlsSpan::Answered(const RlsPlan& plan, int64_t now_micros) {
  if (span_ == nullptr) return;
  const RlsOutcome outcome = DecideOutcome(plan, now_micros);
  // Code_Name's strings live as long as the program.
  span_->AddLiteral("ratelimit.overall_code", RateLimitResponse::Code_Name(outcome.overall_code));
  span_->AddInt("ratelimit.over_limit_descriptors", outcome.over_limit_descriptors);
  if (grpc_) span_->AddInt("rpc.grpc.status_code", 0);
  tracer_->End(std::move(*span_));
  span_.reset();
}

void RlsSpan::Failed(const absl::Status& error) {
  if (span_ == nullptr) return;
  if (grpc_) span_->AddInt("rpc.grpc.status_code", static_cast<int64_t>(error.code()));
  span_->SetError(std::string_view(error.message().data(), error.message().size()));
  tracer_->End(std::move(*span_));
  span_.reset();
}

}  // namespace tollgate::server
