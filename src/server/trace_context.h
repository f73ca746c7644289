// Copyright tollgate authors. W3C Trace Context (https://www.w3.org/TR/trace-context/) as a
// server that receives it needs: trace and span ids, the `traceparent` header, the sampling
// rule, and random ids. Pure functions and a generator per thread; no I/O, no lock.
#ifndef TOLLGATE_SRC_SERVER_TRACE_CONTEXT_H_
#define TOLLGATE_SRC_SERVER_TRACE_CONTEXT_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/types/span.h"

namespace tollgate::server {

// 16 bytes; all zero is invalid.
using TraceId = std::array<uint8_t, 16>;
// 8 bytes; all zero is invalid.
using SpanId = std::array<uint8_t, 8>;

// The W3C trace-flags bit that says the caller records the trace.
inline constexpr uint8_t kTraceFlagSampled = 0x01;

// A valid `traceparent`: the caller's trace, its span (our span's parent) and its flags.
struct TraceParent {
  TraceId trace_id{};
  SpanId span_id{};
  uint8_t flags = 0;

  bool sampled() const { return (flags & kTraceFlagSampled) != 0; }
};

// Reads a `traceparent` header value, "VERSION-TRACEID-PARENTID-FLAGS" in lower-case hex
// (2-32-16-2 digits), as Trace Context level 1 says a receiver must: nullopt, meaning the
// header is ignored and a new trace starts, for
// - version "ff", or a version that is not two lower-case hex digits;
// - version 00 of any length but 55;
// - a later version shorter than 55, or whose 56th character is not '-' (what follows is
//   that version's and is not read);
// - a missing '-', an upper-case or non-hex digit, an all-zero trace id or parent id.
std::optional<TraceParent> ParseTraceParent(std::string_view value);

// "00-TRACEID-PARENTID-FLAGS": the header a caller sends (tests, clients).
std::string FormatTraceParent(const TraceParent& parent);

// `id` in lower-case hex, two digits a byte.
std::string HexId(absl::Span<const uint8_t> id);

// Random non-zero ids from a generator of the calling thread (no lock, no system call once
// the thread's generator is seeded).
TraceId NewTraceId();
SpanId NewSpanId();

// OpenTelemetry's TraceIdRatioBased rule: `id` is sampled when its last 8 bytes, read
// big-endian and shifted right by one, are below rate × 2^63. Every service with this rule and
// the same rate keeps the same traces. rate >= 1 samples every id, rate <= 0 none.
bool TraceIdRatioSampled(const TraceId& id, double rate);

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_TRACE_CONTEXT_H_
