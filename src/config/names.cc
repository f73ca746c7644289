// Copyright tollgate authors. Rules for names in configuration.
#include "src/config/names.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace tollgate::config_internal {
namespace {

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
}

// Levenshtein distance; the strings are short key names.
size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string LimitNameProblem(absl::string_view name) {
  if (name.empty()) return "expected a non-empty limit name";
  if (name.size() > kMaxLimitNameBytes) {
    return absl::StrCat("expected a limit name of at most ", kMaxLimitNameBytes, " bytes");
  }
  if (!std::all_of(name.begin(), name.end(), IsNameChar)) {
    return "expected a limit name of letters, digits, '_', '.' and '-'";
  }
  return "";
}

absl::string_view ClosestName(absl::string_view typed,
                              absl::Span<const absl::string_view> candidates) {
  absl::string_view best;
  size_t best_distance = 3;  // Suggest only within 2 edits.
  for (absl::string_view candidate : candidates) {
    const size_t distance = EditDistance(typed, candidate);
    if (distance < best_distance && distance * 2 < candidate.size()) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

}  // namespace tollgate::config_internal
