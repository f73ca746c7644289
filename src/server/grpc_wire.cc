// Copyright tollgate authors.
#include "src/server/grpc_wire.h"

#include <array>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tollgate::server {

namespace {

constexpr std::array<std::string_view, 17> kStatusNames = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
};

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A header value given twice is a client error for the headers we read.
void Set(std::string& field, std::string_view value, bool& seen, bool& duplicate) {
  if (seen) duplicate = true;
  seen = true;
  field.assign(value.data(), value.size());
}

// The member of `headers` a header name other than grpc-timeout is kept in, or nullptr.
std::string* FieldFor(GrpcRequestHeaders& headers, std::string_view name) {
  // By length first: most names a client sends (user-agent, :scheme...) are none of these.
  switch (name.size()) {
    case 2:
      return name == "te" ? &headers.te : nullptr;
    case 5:
      return name == ":path" ? &headers.path : nullptr;
    case 7:
      return name == ":method" ? &headers.method : nullptr;
    case 11:
      return name == "traceparent" ? &headers.traceparent : nullptr;
    case 12:
      return name == "content-type" ? &headers.content_type : nullptr;
    case 13:
      return name == "grpc-encoding" ? &headers.grpc_encoding : nullptr;
    default:
      return nullptr;
  }
}

}  // namespace

std::string_view GrpcStatusName(GrpcStatusCode code) {
  const int number = static_cast<int>(code);
  if (number < 0 || number >= static_cast<int>(kStatusNames.size())) return "UNKNOWN";
  return kStatusNames[number];
}

std::string GrpcStatusValue(GrpcStatusCode code) { return std::to_string(static_cast<int>(code)); }

std::string GrpcMessagePrefix(uint32_t length) {
  std::string prefix(kGrpcMessagePrefixBytes, '\0');
  prefix[1] = static_cast<char>((length >> 24) & 0xff);
  prefix[2] = static_cast<char>((length >> 16) & 0xff);
  prefix[3] = static_cast<char>((length >> 8) & 0xff);
  prefix[4] = static_cast<char>(length & 0xff);
  return prefix;
}

GrpcUnaryBody ParseGrpcUnaryBody(std::string_view body, uint32_t max_message_bytes) {
  GrpcUnaryBody parsed;
  if (body.size() < kGrpcMessagePrefixBytes) return parsed;  // kIncomplete
  const auto byte = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(body[i])); };
  parsed.announced_length = (byte(1) << 24) | (byte(2) << 16) | (byte(3) << 8) | byte(4);
  const uint32_t flag = byte(0);
  if (flag == 1) {
    parsed.result = GrpcUnaryBody::Result::kCompressed;
    return parsed;
  }
  if (flag != 0) {
    parsed.result = GrpcUnaryBody::Result::kBadFlag;
    return parsed;
  }
  if (parsed.announced_length > max_message_bytes) {
    parsed.result = GrpcUnaryBody::Result::kTooLarge;
    return parsed;
  }
  const size_t end = kGrpcMessagePrefixBytes + parsed.announced_length;
  if (body.size() < end) return parsed;  // kIncomplete
  if (body.size() > end) {
    parsed.result = GrpcUnaryBody::Result::kTrailingBytes;
    return parsed;
  }
  parsed.result = GrpcUnaryBody::Result::kMessage;
  parsed.message = body.substr(kGrpcMessagePrefixBytes, parsed.announced_length);
  return parsed;
}

std::optional<std::chrono::nanoseconds> ParseGrpcTimeout(std::string_view value) {
  if (value.size() < 2 || value.size() > 9) return std::nullopt;
  int64_t amount = 0;
  for (char c : value.substr(0, value.size() - 1)) {
    if (c < '0' || c > '9') return std::nullopt;
    amount = amount * 10 + (c - '0');  // at most 99,999,999: no overflow
  }
  int64_t nanos_per_unit = 0;
  switch (value.back()) {
    case 'H':
      nanos_per_unit = int64_t{3600} * 1'000'000'000;
      break;
    case 'M':
      nanos_per_unit = int64_t{60} * 1'000'000'000;
      break;
    case 'S':
      nanos_per_unit = 1'000'000'000;
      break;
    case 'm':
      nanos_per_unit = 1'000'000;
      break;
    case 'u':
      nanos_per_unit = 1'000;
      break;
    case 'n':
      nanos_per_unit = 1;
      break;
    default:
      return std::nullopt;
  }
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  if (amount > kMax / nanos_per_unit) return std::chrono::nanoseconds(kMax);
  return std::chrono::nanoseconds(amount * nanos_per_unit);
}

std::string PercentEncodeGrpcMessage(std::string_view message) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string encoded;
  encoded.reserve(message.size());
  for (char c : message) {
    const auto byte = static_cast<uint8_t>(c);
    if (byte >= 0x20 && byte <= 0x7e && byte != '%') {
      encoded.push_back(c);
    } else {
      encoded.push_back('%');
      encoded.push_back(kHex[byte >> 4]);
      encoded.push_back(kHex[byte & 0xf]);
    }
  }
  return encoded;
}

std::string PercentDecodeGrpcMessage(std::string_view encoded) {
  std::string decoded;
  decoded.reserve(encoded.size());
  for (size_t i = 0; i < encoded.size(); ++i) {
    if (encoded[i] == '%' && i + 2 < encoded.size()) {
      const int high = HexValue(encoded[i + 1]);
      const int low = HexValue(encoded[i + 2]);
      if (high >= 0 && low >= 0) {
        decoded.push_back(static_cast<char>(high * 16 + low));
        i += 2;
        continue;
      }
    }
    decoded.push_back(encoded[i]);
  }
  return decoded;
}

void GrpcRequestHeaders::Add(std::string_view name, std::string_view value) {
  if (name == "grpc-timeout") {
    Set(grpc_timeout, value, has_grpc_timeout, duplicate);
    return;
  }
  // A header given twice with an empty first value is not noticed; the checks below refuse
  // an empty :method or content-type anyway.
  std::string* field = FieldFor(*this, name);
  if (field == nullptr) return;
  if (field == &traceparent) {
    if (traceparent_seen) {
      traceparent.clear();
    } else {
      traceparent.assign(value.data(), value.size());
    }
    traceparent_seen = true;
    return;
  }
  bool seen = !field->empty();
  Set(*field, value, seen, duplicate);
}

void GrpcRequestHeaders::Clear() {
  method.clear();
  path.clear();
  content_type.clear();
  te.clear();
  grpc_encoding.clear();
  grpc_timeout.clear();
  has_grpc_timeout = false;
  duplicate = false;
  traceparent.clear();
  traceparent_seen = false;
}

GrpcRequestCheck CheckGrpcRequestHeaders(const GrpcRequestHeaders& headers) {
  GrpcRequestCheck check;
  if (headers.method != "POST") {
    check.result = GrpcRequestCheck::Result::kMethodNotAllowed;
    return check;
  }
  absl::string_view type = headers.content_type;
  if (const size_t semicolon = type.find(';'); semicolon != absl::string_view::npos) {
    type = absl::StripTrailingAsciiWhitespace(type.substr(0, semicolon));
  }
  // Exactly "application/grpc" (what clients send) at once; any case otherwise.
  if (type != "application/grpc" && !absl::EqualsIgnoreCase(type, "application/grpc") &&
      !absl::EqualsIgnoreCase(type, "application/grpc+proto")) {
    check.result = GrpcRequestCheck::Result::kUnsupportedMediaType;
    return check;
  }
  if (headers.duplicate) {
    check.result = GrpcRequestCheck::Result::kBadHeaders;
    check.problem = "a gRPC request header was given twice";
    return check;
  }
  if (!headers.te.empty() && headers.te != "trailers") {
    check.result = GrpcRequestCheck::Result::kBadHeaders;
    check.problem = "te must be \"trailers\"";
    return check;
  }
  if (headers.has_grpc_timeout) {
    check.timeout = ParseGrpcTimeout(headers.grpc_timeout);
    if (!check.timeout.has_value()) {
      check.result = GrpcRequestCheck::Result::kBadHeaders;
      check.problem = "malformed grpc-timeout";
      return check;
    }
  }
  if (!headers.grpc_encoding.empty() && headers.grpc_encoding != "identity") {
    check.result = GrpcRequestCheck::Result::kUnsupportedEncoding;
    return check;
  }
  return check;
}

}  // namespace tollgate::server
