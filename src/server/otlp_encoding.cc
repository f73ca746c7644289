// Copyright tollgate authors.
#include "src/server/otlp_encoding.h"

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <string_view>
#include <variant>

#include "src/server/protobuf_wire.h"

namespace tollgate::server {
namespace {

using protobuf_wire::Extend;
using protobuf_wire::Fixed32FieldSize;
using protobuf_wire::kVarint;
using protobuf_wire::LengthDelimitedSize;
using protobuf_wire::StringFieldSize;
using protobuf_wire::VarintFieldSize;
using protobuf_wire::VarintSize;
using protobuf_wire::WireCursor;

// Field numbers (proto/opentelemetry/...).
// ExportTraceServiceRequest, ResourceSpans, Resource, ScopeSpans, InstrumentationScope.
constexpr uint32_t kResourceSpans = 1;
constexpr uint32_t kResource = 1;
constexpr uint32_t kScopeSpans = 2;
constexpr uint32_t kResourceAttributes = 1;
constexpr uint32_t kScope = 1;
constexpr uint32_t kSpans = 2;
constexpr uint32_t kScopeName = 1;
constexpr uint32_t kScopeVersion = 2;
// Span.
constexpr uint32_t kTraceId = 1;
constexpr uint32_t kSpanId = 2;
constexpr uint32_t kParentSpanId = 4;
constexpr uint32_t kName = 5;
constexpr uint32_t kKind = 6;
constexpr uint32_t kStartTime = 7;
constexpr uint32_t kEndTime = 8;
constexpr uint32_t kAttributes = 9;
constexpr uint32_t kStatus = 15;
constexpr uint32_t kFlags = 16;
// Status.
constexpr uint32_t kStatusMessage = 2;
constexpr uint32_t kStatusCode = 3;
// KeyValue, AnyValue, ArrayValue.
constexpr uint32_t kKey = 1;
constexpr uint32_t kValue = 2;
constexpr uint32_t kStringValue = 1;
constexpr uint32_t kBoolValue = 2;
constexpr uint32_t kIntValue = 3;
constexpr uint32_t kArrayValue = 5;
constexpr uint32_t kArrayValues = 1;

// Span.flags bits 8 and 9: whether the parent's remoteness is known, and that it is remote.
constexpr uint32_t kFlagHasIsRemote = 0x100;
constexpr uint32_t kFlagIsRemote = 0x200;
// A fixed64 field below 16: tag and 8 bytes.
constexpr size_t kFixed64FieldSize = 9;

std::string_view View(absl::Span<const uint8_t> id) {
  return {reinterpret_cast<const char*>(id.data()), id.size()};
}

bool HasParent(const SpanRecord& span) {
  return std::any_of(span.parent_span_id.begin(), span.parent_span_id.end(),
                     [](uint8_t byte) { return byte != 0; });
}

// An AnyValue's members are a oneof: written even when zero or empty. Each function pair
// below gives a message's size (without its own tag and length), then writes it.
size_t AnyStringSize(std::string_view text) { return LengthDelimitedSize(text.size()); }

size_t ArraySize(const std::vector<std::string>& texts) {
  size_t size = 0;
  for (const std::string& text : texts) size += LengthDelimitedSize(AnyStringSize(text));
  return size;
}

size_t AnyValueSize(const SpanAttribute& attribute) {
  struct Size {
    size_t operator()(const std::string& text) const { return AnyStringSize(text); }
    size_t operator()(std::string_view text) const { return AnyStringSize(text); }
    size_t operator()(int64_t number) const {
      return 1 + VarintSize(static_cast<uint64_t>(number));
    }
    size_t operator()(bool) const { return 2; }
    size_t operator()(const std::vector<std::string>& texts) const {
      return LengthDelimitedSize(ArraySize(texts));
    }
  };
  return std::visit(Size{}, attribute.value);
}

void PutAnyValue(WireCursor& out, const SpanAttribute& attribute) {
  struct Put {
    WireCursor& out;
    void operator()(const std::string& text) const { out.BytesField(kStringValue, text); }
    void operator()(std::string_view text) const { out.BytesField(kStringValue, text); }
    void operator()(int64_t number) const {
      out.Tagged(kIntValue, kVarint, static_cast<uint64_t>(number));
    }
    void operator()(bool flag) const { out.Tagged(kBoolValue, kVarint, flag ? 1 : 0); }
    void operator()(const std::vector<std::string>& texts) const {
      out.LengthDelimited(kArrayValue, ArraySize(texts));
      for (const std::string& text : texts) {
        out.LengthDelimited(kArrayValues, AnyStringSize(text));
        out.BytesField(kStringValue, text);
      }
    }
  };
  std::visit(Put{out}, attribute.value);
}

size_t KeyValueSize(const SpanAttribute& attribute) {
  return StringFieldSize(attribute.key) + LengthDelimitedSize(AnyValueSize(attribute));
}

void PutKeyValue(WireCursor& out, uint32_t field, const SpanAttribute& attribute) {
  const size_t value_size = AnyValueSize(attribute);
  out.LengthDelimited(field, StringFieldSize(attribute.key) + LengthDelimitedSize(value_size));
  out.StringField(kKey, attribute.key);
  out.LengthDelimited(kValue, value_size);
  PutAnyValue(out, attribute);
}

size_t StatusSize(const SpanRecord& span) {
  return StringFieldSize(span.status_message) + VarintFieldSize(static_cast<uint64_t>(span.status));
}

size_t SpanSize(const SpanRecord& span) {
  size_t size = LengthDelimitedSize(span.trace_id.size()) +
                LengthDelimitedSize(span.span_id.size()) + StringFieldSize(span.name) +
                VarintFieldSize(static_cast<uint64_t>(span.kind)) + 2 * kFixed64FieldSize +
                Fixed32FieldSize(kFlags);
  if (HasParent(span)) size += LengthDelimitedSize(span.parent_span_id.size());
  for (const SpanAttribute& attribute : span.attributes) {
    size += LengthDelimitedSize(KeyValueSize(attribute));
  }
  if (span.status != SpanStatus::kUnset) size += LengthDelimitedSize(StatusSize(span));
  return size;
}

void PutSpan(WireCursor& out, const SpanRecord& span, size_t size) {
  out.LengthDelimited(kSpans, size);
  out.BytesField(kTraceId, View(span.trace_id));
  out.BytesField(kSpanId, View(span.span_id));
  const bool has_parent = HasParent(span);
  if (has_parent) out.BytesField(kParentSpanId, View(span.parent_span_id));
  out.StringField(kName, span.name);
  out.VarintField(kKind, static_cast<uint64_t>(span.kind));
  out.Fixed64Field(kStartTime, static_cast<uint64_t>(std::max<int64_t>(span.start_unix_nanos, 0)));
  out.Fixed64Field(kEndTime, static_cast<uint64_t>(std::max<int64_t>(span.end_unix_nanos, 0)));
  for (const SpanAttribute& attribute : span.attributes) {
    PutKeyValue(out, kAttributes, attribute);
  }
  if (span.status != SpanStatus::kUnset) {
    out.LengthDelimited(kStatus, StatusSize(span));
    out.StringField(kStatusMessage, span.status_message);
    out.VarintField(kStatusCode, static_cast<uint64_t>(span.status));
  }
  out.Fixed32Field(kFlags, span.trace_flags | kFlagHasIsRemote |
                               (has_parent && span.remote_parent ? kFlagIsRemote : 0));
}

}  // namespace

std::string EncodeExportTraceRequest(const OtlpResource& resource,
                                     absl::Span<const SpanRecord> spans) {
  std::vector<SpanAttribute> resource_attributes;
  resource_attributes.reserve(resource.attributes.size());
  size_t resource_size = 0;
  for (const auto& [key, value] : resource.attributes) {
    resource_attributes.push_back({key, std::string_view(value)});
    resource_size += LengthDelimitedSize(KeyValueSize(resource_attributes.back()));
  }
  const size_t scope_size =
      StringFieldSize(resource.scope_name) + StringFieldSize(resource.scope_version);
  std::vector<size_t> span_sizes;
  span_sizes.reserve(spans.size());
  size_t scope_spans_size = LengthDelimitedSize(scope_size);
  for (const SpanRecord& span : spans) {
    span_sizes.push_back(SpanSize(span));
    scope_spans_size += LengthDelimitedSize(span_sizes.back());
  }
  const size_t resource_spans_size =
      LengthDelimitedSize(resource_size) + LengthDelimitedSize(scope_spans_size);

  std::string bytes;
  WireCursor out = Extend(bytes, LengthDelimitedSize(resource_spans_size));
  out.LengthDelimited(kResourceSpans, resource_spans_size);
  out.LengthDelimited(kResource, resource_size);
  for (const SpanAttribute& attribute : resource_attributes) {
    PutKeyValue(out, kResourceAttributes, attribute);
  }
  out.LengthDelimited(kScopeSpans, scope_spans_size);
  out.LengthDelimited(kScope, scope_size);
  out.StringField(kScopeName, resource.scope_name);
  out.StringField(kScopeVersion, resource.scope_version);
  for (size_t i = 0; i < spans.size(); ++i) PutSpan(out, spans[i], span_sizes[i]);
  assert(out.at() == bytes.data() + bytes.size());  // sized exactly
  return bytes;
}

}  // namespace tollgate::server
