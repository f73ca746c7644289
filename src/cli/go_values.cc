// Copyright tollgate authors.
#include "src/cli/go_values.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "src/core/absl_view.h"

namespace tollgate::cli {
namespace {

struct DurationUnit {
  std::string_view name;
  double nanos;
};

// Where several names match ("m" and "ms"), the longest is the unit.
constexpr DurationUnit kUnits[] = {
    {"ns", 1},
    {"us", 1e3},
    {"\xC2\xB5s", 1e3} /* µs, U+00B5 */,
    {"\xCE\xBCs", 1e3} /* μs, U+03BC */,
    {"ms", 1e6},
    {"s", 1e9},
    {"m", 60e9},
    {"h", 3600e9},
};

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

std::optional<bool> ParseGoBool(std::string_view text) {
  for (std::string_view yes : {"1", "t", "T", "TRUE", "true", "True"}) {
    if (text == yes) return true;
  }
  for (std::string_view no : {"0", "f", "F", "FALSE", "false", "False"}) {
    if (text == no) return false;
  }
  return std::nullopt;
}

std::optional<int64_t> ParseGoDurationMicros(std::string_view text) {
  bool negative = false;
  if (!text.empty() && (text[0] == '-' || text[0] == '+')) {
    negative = text[0] == '-';
    text.remove_prefix(1);
  }
  if (text == "0") return 0;
  if (text.empty()) return std::nullopt;
  double nanos = 0;
  while (!text.empty()) {
    size_t end = 0;
    bool digits = false;
    while (end < text.size() && IsDigit(text[end])) {
      ++end;
      digits = true;
    }
    if (end < text.size() && text[end] == '.') {
      ++end;
      while (end < text.size() && IsDigit(text[end])) {
        ++end;
        digits = true;
      }
    }
    if (!digits) return std::nullopt;
    const std::string number(text.substr(0, end));
    text.remove_prefix(end);
    const DurationUnit* unit = nullptr;
    for (const DurationUnit& candidate : kUnits) {
      if (text.substr(0, candidate.name.size()) == candidate.name &&
          (unit == nullptr || candidate.name.size() > unit->name.size())) {
        unit = &candidate;
      }
    }
    if (unit == nullptr) return std::nullopt;
    text.remove_prefix(unit->name.size());
    nanos += std::strtod(number.c_str(), nullptr) * unit->nanos;
  }
  if (nanos > static_cast<double>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  const int64_t micros = static_cast<int64_t>(nanos / 1000);
  return negative ? -micros : micros;
}

std::optional<int64_t> ParseGoInt(std::string_view text) {
  if (!text.empty() && text[0] == '+') text.remove_prefix(1);
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || ptr != end) return std::nullopt;
  return value;
}

std::optional<double> ParseGoFloat(std::string_view text) {
  double value = 0;
  if (!absl::SimpleAtod(AbslView(text), &value) || !std::isfinite(value)) return std::nullopt;
  for (char c : text) {
    // SimpleAtod also reads hexadecimal and surrounding spaces; the peer's values are decimal.
    if (!(IsDigit(c) || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E')) {
      return std::nullopt;
    }
  }
  return value;
}

std::optional<std::vector<std::pair<std::string, std::string>>> ParseGoMap(std::string_view text) {
  std::vector<std::pair<std::string, std::string>> pairs;
  if (text.empty()) return pairs;
  for (absl::string_view pair : absl::StrSplit(AbslView(text), ',')) {
    const size_t colon = pair.find(':');
    if (colon == absl::string_view::npos) return std::nullopt;
    pairs.emplace_back(std::string(pair.substr(0, colon)), std::string(pair.substr(colon + 1)));
  }
  return pairs;
}

}  // namespace tollgate::cli
