// Copyright tollgate authors.
#include "src/server/trace_context.h"

#include <algorithm>
#include <cstddef>

#include "absl/random/random.h"

namespace tollgate::server {
namespace {

// Lengths in a version-00 header: "00-" 32 "-" 16 "-" 2.
constexpr size_t kTraceParentLength = 55;
constexpr size_t kTraceIdOffset = 3;
constexpr size_t kSpanIdOffset = 36;
constexpr size_t kFlagsOffset = 53;

// A lower-case hex digit's value, or -1 (the spec allows no upper case).
int LowerHexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// Reads 2 × out.size() hex digits of `text` from `offset` into `out`; false on a bad digit.
bool ReadHex(std::string_view text, size_t offset, absl::Span<uint8_t> out) {
  for (size_t i = 0; i < out.size(); ++i) {
    const int high = LowerHexValue(text[offset + 2 * i]);
    const int low = LowerHexValue(text[offset + 2 * i + 1]);
    if (high < 0 || low < 0) return false;
    out[i] = static_cast<uint8_t>(high * 16 + low);
  }
  return true;
}

template <size_t N>
bool AllZero(const std::array<uint8_t, N>& id) {
  return std::all_of(id.begin(), id.end(), [](uint8_t byte) { return byte == 0; });
}

// Ids need to be unique, not unpredictable: a fast generator per thread, seeded by Abseil from
// the system's entropy.
absl::InsecureBitGen& ThreadGenerator() {
  thread_local absl::InsecureBitGen generator;
  return generator;
}

template <size_t N>
std::array<uint8_t, N> NewId() {
  std::array<uint8_t, N> id{};
  do {
    for (size_t i = 0; i < N; i += 8) {
      uint64_t bits = absl::Uniform<uint64_t>(ThreadGenerator());
      for (size_t j = i; j < i + 8 && j < N; ++j, bits >>= 8) id[j] = static_cast<uint8_t>(bits);
    }
  } while (AllZero(id));
  return id;
}

}  // namespace

std::optional<TraceParent> ParseTraceParent(std::string_view value) {
  if (value.size() < kTraceParentLength) return std::nullopt;
  uint8_t version = 0;
  if (!ReadHex(value, 0, absl::MakeSpan(&version, 1)) || version == 0xff) return std::nullopt;
  if (version == 0 && value.size() != kTraceParentLength) return std::nullopt;
  if (value.size() > kTraceParentLength && value[kTraceParentLength] != '-') return std::nullopt;
  if (value[2] != '-' || value[kSpanIdOffset - 1] != '-' || value[kFlagsOffset - 1] != '-') {
    return std::nullopt;
  }
  TraceParent parent;
  if (!ReadHex(value, kTraceIdOffset, absl::MakeSpan(parent.trace_id)) ||
      !ReadHex(value, kSpanIdOffset, absl::MakeSpan(parent.span_id)) ||
      !ReadHex(value, kFlagsOffset, absl::MakeSpan(&parent.flags, 1))) {
    return std::nullopt;
  }
  if (AllZero(parent.trace_id) || AllZero(parent.span_id)) return std::nullopt;
  return parent;
}

std::string HexId(absl::Span<const uint8_t> id) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(id.size() * 2);
  for (uint8_t byte : id) {
    hex.push_back(kHex[byte >> 4]);
    hex.push_back(kHex[byte & 0xf]);
  }
  return hex;
}

std::string FormatTraceParent(const TraceParent& parent) {
  return "00-" + HexId(parent.trace_id) + "-" + HexId(parent.span_id) + "-" +
         HexId(absl::MakeConstSpan(&parent.flags, 1));
}

TraceId NewTraceId() { return NewId<16>(); }

SpanId NewSpanId() { return NewId<8>(); }

bool TraceIdRatioSampled(const TraceId& id, double rate) {
  if (rate >= 1) return true;
  if (!(rate > 0)) return false;  // also NaN
  uint64_t low = 0;
  for (size_t i = 8; i < 16; ++i) low = (low << 8) | id[i];
  const auto bound = static_cast<uint64_t>(rate * 9223372036854775808.0);  // rate × 2^63
  return (low >> 1) < bound;
}

}  // namespace tollgate::server
