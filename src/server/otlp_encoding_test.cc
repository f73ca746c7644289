// Copyright tollgate authors. The export request, read back by the generated OTLP messages.
#include "src/server/otlp_encoding.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb.h"

namespace tollgate::server {
namespace {

using opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest;
using opentelemetry::proto::trace::v1::Span;
using opentelemetry::proto::trace::v1::Status;

template <typename Id>
std::string Bytes(const Id& id) {
  return std::string(reinterpret_cast<const char*>(id.data()), id.size());
}

TEST(OtlpEncodingTest, SpansAndTheirResourceRoundTrip) {
  OtlpResource resource;
  resource.attributes = {{"service.name", "envoy-ratelimit"}, {"service.instance.id", "pod-1"}};
  resource.scope_version = "0.1.0";

  SpanRecord child;
  child.trace_id = NewTraceId();
  child.span_id = NewSpanId();
  child.parent_span_id = NewSpanId();
  child.remote_parent = true;
  child.name = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
  child.start_unix_nanos = 1'700'000'000'000'000'000;
  child.end_unix_nanos = 1'700'000'000'000'250'000;
  child.AddString("domain", "tiffin");
  child.AddInt("rpc.grpc.status_code", 0);
  child.AddBool("flag", true);
  child.AddStrings("ratelimit.descriptor_keys", {"user", "path,method"});
  child.AddLiteral("rpc.system", "grpc");
  child.AddInt("negative", -5);
  child.AddString("empty", "");
  child.AddBool("no", false);

  SpanRecord root;
  root.trace_id = NewTraceId();
  root.span_id = NewSpanId();
  root.name = "POST /json";
  root.SetError("store failed");

  const std::string bytes = EncodeExportTraceRequest(resource, {child, root});
  ExportTraceServiceRequest request;
  ASSERT_TRUE(request.ParseFromString(bytes));
  ASSERT_EQ(request.resource_spans_size(), 1);
  const auto& resource_spans = request.resource_spans(0);
  ASSERT_EQ(resource_spans.resource().attributes_size(), 2);
  EXPECT_EQ(resource_spans.resource().attributes(0).key(), "service.name");
  EXPECT_EQ(resource_spans.resource().attributes(0).value().string_value(), "envoy-ratelimit");
  EXPECT_EQ(resource_spans.resource().attributes(1).value().string_value(), "pod-1");
  ASSERT_EQ(resource_spans.scope_spans_size(), 1);
  EXPECT_EQ(resource_spans.scope_spans(0).scope().name(), "tollgate");
  EXPECT_EQ(resource_spans.scope_spans(0).scope().version(), "0.1.0");
  ASSERT_EQ(resource_spans.scope_spans(0).spans_size(), 2);

  const Span& first = resource_spans.scope_spans(0).spans(0);
  EXPECT_EQ(first.trace_id(), Bytes(child.trace_id));
  EXPECT_EQ(first.span_id(), Bytes(child.span_id));
  EXPECT_EQ(first.parent_span_id(), Bytes(child.parent_span_id));
  EXPECT_EQ(first.flags(), 0x301u);  // sampled; the parent is known to be remote
  EXPECT_EQ(first.name(), child.name);
  EXPECT_EQ(first.kind(), Span::SPAN_KIND_SERVER);
  EXPECT_EQ(first.start_time_unix_nano(), 1'700'000'000'000'000'000u);
  EXPECT_EQ(first.end_time_unix_nano(), 1'700'000'000'000'250'000u);
  ASSERT_EQ(first.attributes_size(), 8);
  EXPECT_EQ(first.attributes(0).key(), "domain");
  EXPECT_EQ(first.attributes(0).value().string_value(), "tiffin");
  EXPECT_EQ(first.attributes(1).value().int_value(), 0);
  EXPECT_TRUE(first.attributes(1).value().has_int_value());
  EXPECT_TRUE(first.attributes(2).value().bool_value());
  ASSERT_EQ(first.attributes(3).value().array_value().values_size(), 2);
  EXPECT_EQ(first.attributes(3).value().array_value().values(1).string_value(), "path,method");
  EXPECT_EQ(first.attributes(4).value().string_value(), "grpc");
  EXPECT_EQ(first.attributes(5).value().int_value(), -5);
  // An AnyValue's member is present even when empty, false or 0.
  EXPECT_TRUE(first.attributes(6).value().has_string_value());
  EXPECT_TRUE(first.attributes(7).value().has_bool_value());
  EXPECT_FALSE(first.attributes(7).value().bool_value());
  EXPECT_FALSE(first.has_status());

  const Span& second = resource_spans.scope_spans(0).spans(1);
  EXPECT_TRUE(second.parent_span_id().empty());
  EXPECT_EQ(second.flags(), 0x101u);  // sampled; no remote parent
  EXPECT_EQ(second.status().code(), Status::STATUS_CODE_ERROR);
  EXPECT_EQ(second.status().message(), "store failed");
}

TEST(OtlpEncodingTest, AttributesAreBounded) {
  SpanRecord span;
  span.AddString("long", std::string(1000, 'a'));
  // A 2-byte character straddling the bound is left out whole.
  span.AddString("utf8", std::string(kMaxAttributeValueBytes - 1, 'a') + "\xc3\xa9");
  span.AddStrings("many", std::vector<std::string>(100, "k"));
  EXPECT_EQ(std::get<std::string>(span.attributes[0].value).size(), kMaxAttributeValueBytes);
  EXPECT_EQ(std::get<std::string>(span.attributes[1].value).size(), kMaxAttributeValueBytes - 1);
  EXPECT_EQ(std::get<std::vector<std::string>>(span.attributes[2].value).size(),
            kMaxAttributeArrayValues);
  ExportTraceServiceRequest request;
  EXPECT_TRUE(request.ParseFromString(EncodeExportTraceRequest({}, {span})));
}

}  // namespace
}  // namespace tollgate::server
