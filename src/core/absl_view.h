// Copyright tollgate authors. A std::string_view as an absl::string_view.
//
// Debian's Abseil is built with an absl::string_view of its own, not an alias of
// std::string_view: Abseil's string functions (StrCat, StrSplit, EqualsIgnoreCase, ...) and
// its hash maps keyed by absl::string_view take one. Where Abseil aliases std::string_view,
// this is the identity.
#ifndef TOLLGATE_SRC_CORE_ABSL_VIEW_H_
#define TOLLGATE_SRC_CORE_ABSL_VIEW_H_

#include <string_view>

#include "absl/strings/string_view.h"

namespace tollgate {

inline absl::string_view AbslView(std::string_view text) { return {text.data(), text.size()}; }

}  // namespace tollgate

#endif  // TOLLGATE_SRC_CORE_ABSL_VIEW_H_
