// Copyright tollgate authors. gRPC's wire format over HTTP/2, the parts a unary server needs
// (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md). Pure functions, no I/O:
// the length-prefixed message, `grpc-timeout`, status names, `grpc-message` encoding and the
// checks on a request's headers. Thread-safe (no state).
#ifndef TOLLGATE_SRC_SERVER_GRPC_WIRE_H_
#define TOLLGATE_SRC_SERVER_GRPC_WIRE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tollgate::server {

// gRPC status codes (the same numbers as absl::StatusCode).
enum class GrpcStatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

// "OK", "INVALID_ARGUMENT", ... as the spec spells them; "UNKNOWN" for a number outside 0..16.
std::string_view GrpcStatusName(GrpcStatusCode code);
// `code` as grpc-status carries it: decimal, "0".."16".
std::string GrpcStatusValue(GrpcStatusCode code);

// A message's prefix: 1 byte compressed flag, 4 bytes big-endian length.
inline constexpr size_t kGrpcMessagePrefixBytes = 5;

// The prefix for a message of `length` bytes (never compressed).
std::string GrpcMessagePrefix(uint32_t length);

// What a request body (all DATA of a stream) holds, read as exactly one message.
struct GrpcUnaryBody {
  enum class Result {
    kMessage,        // one complete message: `message`
    kIncomplete,     // fewer bytes than the prefix says (or than a prefix); more may come
    kTooLarge,       // the prefix announces more than the limit (known from 5 bytes on)
    kCompressed,     // the compressed flag is set
    kBadFlag,        // the flag byte is neither 0 nor 1
    kTrailingBytes,  // bytes after the first message (a second message, or garbage)
  };
  Result result = Result::kIncomplete;
  // For kMessage: the message's bytes, a view into the input.
  std::string_view message;
  // From 5 bytes on: the announced length.
  uint32_t announced_length = 0;
};

// Reads `body` as one length-prefixed message of at most `max_message_bytes`. The prefix is
// checked first, so an oversized or compressed message is known from its first 5 bytes,
// before its payload has arrived. kIncomplete for an empty body.
GrpcUnaryBody ParseGrpcUnaryBody(std::string_view body, uint32_t max_message_bytes);

// `grpc-timeout`: 1 to 8 ASCII digits and a unit, H (hours), M (minutes), S, m (ms),
// u (us), n (ns). The duration, saturated at ~292 years; nullopt for anything else (empty,
// 9 digits, a sign, spaces, another unit).
std::optional<std::chrono::nanoseconds> ParseGrpcTimeout(std::string_view value);

// `grpc-message`: percent-encodes every byte outside 0x20..0x7E and '%' itself ("%XX",
// upper case), as the spec asks; the text is UTF-8 on the other side once decoded.
std::string PercentEncodeGrpcMessage(std::string_view message);
// The inverse; a '%' not followed by two hex digits is kept as it is (the spec: decode
// leniently).
std::string PercentDecodeGrpcMessage(std::string_view encoded);

// The request headers a gRPC server looks at, collected from one HEADERS block.
struct GrpcRequestHeaders {
  std::string method;
  std::string path;
  std::string content_type;
  std::string te;
  std::string grpc_encoding;
  std::string grpc_timeout;
  bool has_grpc_timeout = false;
  // Any header seen twice among the ones above.
  bool duplicate = false;
  // W3C Trace Context's traceparent, for the call's span (src/server/tracing.h); "" when
  // absent or given more than once (then ignored, as Trace Context says, never refused).
  std::string traceparent;
  bool traceparent_seen = false;

  // Records one header (lower-case name, as HTTP/2 requires); others are ignored.
  void Add(std::string_view name, std::string_view value);
  // Back to no header, keeping the strings' capacity (for the next request).
  void Clear();
};

// What a request's headers ask of the server, checked in the spec's order.
struct GrpcRequestCheck {
  enum class Result {
    kOk,
    kMethodNotAllowed,      // :method is not POST: HTTP 405
    kUnsupportedMediaType,  // content-type is not application/grpc[+proto]: HTTP 415
    kBadHeaders,            // a header given twice, te other than "trailers", or a bad
                            // grpc-timeout: grpc-status INTERNAL
    kUnsupportedEncoding,   // grpc-encoding other than identity: UNIMPLEMENTED, with
                            // grpc-accept-encoding: identity
  };
  Result result = Result::kOk;
  // For kOk: the call's timeout when the client gave one.
  std::optional<std::chrono::nanoseconds> timeout;
  // For kBadHeaders: which one (for grpc-message).
  std::string_view problem;
};

// Checks `headers`. `te` is tolerated when missing (some clients omit it); when present it
// must be "trailers". content-type may carry parameters ("application/grpc; charset=...").
GrpcRequestCheck CheckGrpcRequestHeaders(const GrpcRequestHeaders& headers);

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_GRPC_WIRE_H_
