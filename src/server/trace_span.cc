// Copyright tollgate authors.
#include "src/server/trace_span.h"

namespace tollgate::server {

std::string_view CutUtf8(std::string_view value, size_t max_bytes) {
  if (value.size() <= max_bytes) return value;
  size_t end = max_bytes;
  // Back off continuation bytes (10xxxxxx) so that the cut falls before a character's first byte.
  while (end > 0 && (static_cast<uint8_t>(value[end]) & 0xc0) == 0x80) --end;
  return value.substr(0, end);
}

void SpanRecord::AddString(std::string_view key, std::string_view value) {
  attributes.push_back({key, std::string(CutUtf8(value, kMaxAttributeValueBytes))});
}

void SpanRecord::AddStrings(std::string_view key, std::vector<std::string> values) {
  if (values.size() > kMaxAttributeArrayValues) values.resize(kMaxAttributeArrayValues);
  for (std::string& value : values) value.resize(CutUtf8(value, kMaxAttributeValueBytes).size());
  attributes.push_back({key, std::move(values)});
}

void SpanRecord::SetError(std::string_view message) {
  status = SpanStatus::kError;
  status_message = std::string(CutUtf8(message, kMaxAttributeValueBytes));
}

}  // namespace tollgate::server
