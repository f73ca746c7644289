// Copyright tollgate authors. Durations in configuration: "250us", "10ms", "1s", "10m".
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "tollgate/config.h"

namespace tollgate {
namespace {

struct Unit {
  absl::string_view suffix;
  int64_t micros;
};

// Each suffix is compared with the whole text after the digits, so the order is free.
constexpr Unit kUnits[] = {
    {"us", 1},         {"ms", 1'000},        {"s", 1'000'000},
    {"m", 60'000'000}, {"h", 3'600'000'000}, {"d", 86'400'000'000},
};

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

absl::StatusOr<int64_t> ParseDurationMicros(std::string_view std_text) {
  // Debian's Abseil has its own string_view type, which absl::StrCat takes.
  const absl::string_view text(std_text.data(), std_text.size());
  const std::string shown = absl::StrCat("'", text, "'");
  size_t digits = 0;
  while (digits < text.size() && IsDigit(text[digits])) ++digits;
  const absl::string_view number = text.substr(0, digits);
  const absl::string_view suffix = text.substr(digits);

  if (!text.empty() && text[0] == '-') {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a positive duration such as 10ms, got ", shown));
  }
  if (number.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected a duration: a whole number and a unit (us, ms, s, m, h, d) such as 10ms, got ",
        shown));
  }
  if (suffix.empty()) {
    // A bare number is refused rather than guessed at: "10" could mean 10ms or 10s.
    return absl::InvalidArgumentError(absl::StrCat(
        "expected a unit after the number (us, ms, s, m, h, d) such as 10ms, got ", shown));
  }
  int64_t unit_micros = 0;
  for (const Unit& unit : kUnits) {
    if (suffix == unit.suffix) unit_micros = unit.micros;
  }
  if (unit_micros == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected a duration: a whole number and a unit (us, ms, s, m, h, d) such as 10ms, got ",
        shown));
  }

  // Accumulate with an overflow check; the result must fit in int64 microseconds.
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t value = 0;
  for (char c : number) {
    const int64_t digit = c - '0';
    if (value > (kMax - digit) / 10) {
      return absl::InvalidArgumentError(
          absl::StrCat("expected a duration that fits in 64-bit microseconds, got ", shown));
    }
    value = value * 10 + digit;
  }
  if (value == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a positive duration such as 10ms, got ", shown));
  }
  if (value > kMax / unit_micros) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a duration that fits in 64-bit microseconds, got ", shown));
  }
  return value * unit_micros;
}

}  // namespace tollgate
