// Copyright tollgate authors. One span as the request path records it and the OTLP exporter
// (src/server/otlp_exporter.h) sends it: plain values, moved, never shared.
#ifndef TOLLGATE_SRC_SERVER_TRACE_SPAN_H_
#define TOLLGATE_SRC_SERVER_TRACE_SPAN_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "src/server/trace_context.h"

namespace tollgate::server {

// Longest string an attribute keeps (longer ones are cut, on a UTF-8 character boundary), and
// most strings an array attribute keeps: a span's size is bounded whatever a request holds.
inline constexpr size_t kMaxAttributeValueBytes = 256;
inline constexpr size_t kMaxAttributeArrayValues = 32;

struct SpanAttribute {
  // A name that lives as long as the program (a literal): names are not copied per span.
  std::string_view key;
  // A string_view is a string that lives as long as the program (AddLiteral).
  std::variant<std::string, std::string_view, int64_t, bool, std::vector<std::string>> value;
};

// OTLP's Span.SpanKind numbers.
enum class SpanKind { kInternal = 1, kServer = 2, kClient = 3 };
// OTLP's Status.StatusCode numbers.
enum class SpanStatus { kUnset = 0, kOk = 1, kError = 2 };

struct SpanRecord {
  TraceId trace_id{};
  SpanId span_id{};
  // All zero for a root span.
  SpanId parent_span_id{};
  // The parent came from another process (a traceparent header).
  bool remote_parent = false;
  // W3C trace-flags (kTraceFlagSampled: every span recorded is sampled).
  uint8_t trace_flags = kTraceFlagSampled;
  // A literal, like attribute keys.
  std::string_view name;
  SpanKind kind = SpanKind::kServer;
  // Nanoseconds since the Unix epoch.
  int64_t start_unix_nanos = 0;
  int64_t end_unix_nanos = 0;
  std::vector<SpanAttribute> attributes;
  SpanStatus status = SpanStatus::kUnset;
  // With kError: what went wrong.
  std::string status_message;

  // Adds a string attribute, cut to kMaxAttributeValueBytes.
  void AddString(std::string_view key, std::string_view value);
  // Adds a string attribute that lives as long as the program (a literal): not copied.
  void AddLiteral(std::string_view key, std::string_view value) {
    attributes.push_back({key, value});
  }
  // Adds a string-array attribute of at most kMaxAttributeArrayValues values, each cut to
  // kMaxAttributeValueBytes.
  void AddStrings(std::string_view key, std::vector<std::string> values);
  // Status kError with `message`, cut to kMaxAttributeValueBytes.
  void SetError(std::string_view message);
  void AddInt(std::string_view key, int64_t value) { attributes.push_back({key, value}); }
  void AddBool(std::string_view key, bool value) { attributes.push_back({key, value}); }
};

// `value` cut to at most `max_bytes` without splitting a UTF-8 character.
std::string_view CutUtf8(std::string_view value, size_t max_bytes);

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_TRACE_SPAN_H_
