// Copyright tollgate authors. Rules for names in configuration.
#ifndef TOLLGATE_SRC_CONFIG_NAMES_H_
#define TOLLGATE_SRC_CONFIG_NAMES_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tollgate::config_internal {

// Limit names appear in HTTP requests, Redis keys and metric labels, so they are kept to
// characters that need no escaping anywhere.
inline constexpr size_t kMaxLimitNameBytes = 128;

// Empty when `name` is a valid limit name: 1 to 128 bytes of [A-Za-z0-9_.-]. Otherwise what
// was expected, e.g. "expected a limit name of letters, digits, '_', '.' and '-'".
std::string LimitNameProblem(absl::string_view name);

// The entry of `candidates` closest to `typed` (a likely typo: at most 2 edits, and fewer
// than half of its length), or empty when none is close.
absl::string_view ClosestName(absl::string_view typed,
                              absl::Span<const absl::string_view> candidates);

}  // namespace tollgate::config_internal

#endif  // TOLLGATE_SRC_CONFIG_NAMES_H_
