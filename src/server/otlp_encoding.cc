// Copyright tollgate authors.
#include "src/server/otlp_encoding.h"

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <variant>

#include "google/protobuf/arena.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb.h"

namespace tollgate::server {
namespace {

namespace common = opentelemetry::proto::common::v1;
namespace trace = opentelemetry::proto::trace::v1;

// Span.flags bits 8 and 9: whether the parent's remoteness is known, and that it is remote.
constexpr uint32_t kFlagHasIsRemote = 0x100;
constexpr uint32_t kFlagIsRemote = 0x200;

template <typename Id>
std::string Bytes(const Id& id) {
  return std::string(reinterpret_cast<const char*>(id.data()), id.size());
}

// Sets `value` from one of SpanAttribute's kinds.
struct SetValue {
  common::AnyValue* value;
  void operator()(const std::string& text) const { value->set_string_value(text); }
  void operator()(std::string_view text) const {
    value->set_string_value(text.data(), text.size());
  }
  void operator()(int64_t number) const { value->set_int_value(number); }
  void operator()(bool flag) const { value->set_bool_value(flag); }
  void operator()(const std::vector<std::string>& texts) const {
    common::ArrayValue* array = value->mutable_array_value();
    for (const std::string& text : texts) array->add_values()->set_string_value(text);
  }
};

void EncodeSpan(const SpanRecord& record, trace::Span* span) {
  span->set_trace_id(Bytes(record.trace_id));
  span->set_span_id(Bytes(record.span_id));
  const bool has_parent = std::any_of(record.parent_span_id.begin(), record.parent_span_id.end(),
                                      [](uint8_t byte) { return byte != 0; });
  if (has_parent) span->set_parent_span_id(Bytes(record.parent_span_id));
  span->set_flags(record.trace_flags | kFlagHasIsRemote |
                  (has_parent && record.remote_parent ? kFlagIsRemote : 0));
  span->set_name(record.name.data(), record.name.size());
  span->set_kind(static_cast<trace::Span::SpanKind>(record.kind));
  span->set_start_time_unix_nano(
      static_cast<uint64_t>(std::max<int64_t>(record.start_unix_nanos, 0)));
  span->set_end_time_unix_nano(static_cast<uint64_t>(std::max<int64_t>(record.end_unix_nanos, 0)));
  span->mutable_attributes()->Reserve(static_cast<int>(record.attributes.size()));
  for (const SpanAttribute& attribute : record.attributes) {
    common::KeyValue* key_value = span->add_attributes();
    key_value->set_key(attribute.key.data(), attribute.key.size());
    std::visit(SetValue{key_value->mutable_value()}, attribute.value);
  }
  if (record.status != SpanStatus::kUnset) {
    trace::Status* status = span->mutable_status();
    status->set_code(static_cast<trace::Status::StatusCode>(record.status));
    status->set_message(record.status_message);
  }
}

}  // namespace

std::string EncodeExportTraceRequest(const OtlpResource& resource,
                                     absl::Span<const SpanRecord> spans) {
  // One arena for the request's many small messages: freed at once.
  google::protobuf::Arena arena;
  auto& request = *google::protobuf::Arena::CreateMessage<
      opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest>(&arena);
  trace::ResourceSpans* resource_spans = request.add_resource_spans();
  for (const auto& [key, value] : resource.attributes) {
    common::KeyValue* attribute = resource_spans->mutable_resource()->add_attributes();
    attribute->set_key(key);
    attribute->mutable_value()->set_string_value(value);
  }
  trace::ScopeSpans* scope_spans = resource_spans->add_scope_spans();
  scope_spans->mutable_scope()->set_name(resource.scope_name);
  scope_spans->mutable_scope()->set_version(resource.scope_version);
  scope_spans->mutable_spans()->Reserve(static_cast<int>(spans.size()));
  for (const SpanRecord& record : spans) EncodeSpan(record, scope_spans->add_spans());
  return request.SerializeAsString();
}

}  // namespace tollgate::server
