// Copyright tollgate authors. Rules every store applies to an all-or-nothing batch.
#ifndef TOLLGATE_SRC_CORE_BATCH_H_
#define TOLLGATE_SRC_CORE_BATCH_H_

#include <algorithm>

#include "absl/types/span.h"
#include "tollgate/decision.h"
#include "tollgate/store.h"

namespace tollgate::internal {

// Whether a batch with these decisions passes: every conditional (IsConditional), non-shadow
// item allowed. REQUIRES: items.size() == decisions.size().
inline bool BatchAllowed(absl::Span<const CheckItem> items, absl::Span<const Decision> decisions) {
  for (size_t i = 0; i < items.size(); ++i) {
    if (!decisions[i].allowed && !items[i].shadow && IsConditional(items[i].op)) return false;
  }
  return true;
}

// For a refused batch, whose conditional items consumed nothing: each allowed conditional
// item's `remaining`, computed as if its cost had been taken, gets the cost back (capped at
// the limit), so it says what the item really has left. The other items were applied and
// keep theirs. REQUIRES: items.size() == decisions.size().
inline void GiveBackUncharged(absl::Span<const CheckItem> items, absl::Span<Decision> decisions) {
  for (size_t i = 0; i < items.size(); ++i) {
    Decision& decision = decisions[i];
    if (!decision.allowed || !IsConditional(items[i].op)) continue;
    decision.remaining = std::min(decision.limit, decision.remaining + items[i].cost);
  }
}

}  // namespace tollgate::internal

#endif  // TOLLGATE_SRC_CORE_BATCH_H_
