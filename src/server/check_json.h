// Copyright tollgate authors. The JSON of POST /v1/check: parsing requests, writing replies.
//
// Request, one limit:   {"limit": "api_per_user", "key": "user:42", "cost": 1}
// Request, all-or-none: {"checks": [{"limit": ..., "key": ..., "cost": ...}, ...]}
// An item may say "reserve": true (reserve its cost, to settle later: POST /v1/settle).
// See docs/http.md for the reply.
#ifndef TOLLGATE_SRC_SERVER_CHECK_JSON_H_
#define TOLLGATE_SRC_SERVER_CHECK_JSON_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "nlohmann/json.hpp"
#include "tollgate/decision.h"
#include "tollgate/limiter.h"

namespace tollgate::server {

// The default bound on the items of one {"checks": [...]} (`tollgate serve
// --max-descriptors`).
inline constexpr size_t kMaxChecksPerRequest = 64;
// Deeper JSON than this is refused before it is built (a body of 64 KiB of '[' must not
// cost a deep tree).
inline constexpr int kMaxJsonDepth = 8;

// One {"limit", "key", "cost", "reserve"} object, as the client sent it (its limit not looked
// up yet).
struct ParsedCheck {
  std::string limit;
  std::string key;
  int64_t cost = 1;
  bool reserve = false;
};

struct ParsedCheckBody {
  // One item for {"limit": ...}; one per element for {"checks": [...]}.
  std::vector<ParsedCheck> requests;
  // True for the {"checks": [...]} form, whose reply carries a `results` array.
  bool batch = false;
};

// Parses and validates a check body: a JSON object with either `limit`, `key` and optional
// `cost` and `reserve` (true or false), or `checks`, an array of 1..`max_checks` such objects;
// no other fields.
// `limit` and `key` are non-empty strings, the key at most kMaxKeyBytes bytes; `cost` is an
// integer >= 0 (default 1). Limit names are not looked up here.
// On failure returns InvalidArgument with a message for the client that names the field,
// e.g. `checks[1].cost: expected an integer >= 0, got "3"`. Never throws.
absl::StatusOr<ParsedCheckBody> ParseCheckBody(std::string_view body,
                                               size_t max_checks = kMaxChecksPerRequest);

// The index of the decision that speaks for a batch: when refused, the refusing item that
// waits longest (a cost that can never pass counts as forever; the first on ties); when
// allowed, the item with the least remaining (the first on ties).
// REQUIRES: !decisions.empty().
size_t MostRestrictive(bool allowed, absl::Span<const Decision> decisions);

// What a metered reply adds to a decision: empty members are left out.
struct DecisionExtras {
  // An admitted reservation's token (`"reserve": true`).
  std::string reservation;
  // A lease taken or renewed (a concurrency limit), and its lease time.
  std::string lease;
  int64_t expires_in_ms = 0;
  // POST /v1/release: whether the lease was held.
  std::optional<bool> released;
};

// The extras of item `i` of `result` for `limits[i]`: its reservation token, or its lease and
// the lease time. REQUIRES: limits.size() == result.decisions.size().
DecisionExtras ExtrasOf(const MultiDecision& result, absl::Span<const Limit* const> limits,
                        size_t i);

// {"allowed", "debt" (only when in debt), "expires_in_ms" and "lease" (a lease), "limit",
//  "name", "reason" (only when refused), "released" (a release), "remaining", "reservation"
//  (an admitted reservation), "reset_after_ms", "retry_after_ms", "source"}, serialized
//  compactly with the members in that order.
std::string DecisionJson(absl::string_view name, const Decision& decision,
                         const DecisionExtras& extras = {});

// The reply body for a checked request: for a single check, DecisionJson of it; for a batch,
// DecisionJson of the MostRestrictive item with `allowed` the batch's (and "reason" only
// when refused), plus `results`, each item's DecisionJson in order. An admitted reservation's
// token or lease (result.tokens, ExtrasOf) is in its item's DecisionJson.
// REQUIRES: result.decisions.size() == body.requests.size() > 0; `limits` empty (no extras)
// or one per item.
std::string CheckReplyBody(const ParsedCheckBody& body, const MultiDecision& result,
                           absl::Span<const Limit* const> limits = {});

// {"error": message}, serialized. Invalid UTF-8 in `message` is replaced, never thrown on.
std::string ErrorBody(absl::string_view message);

// Serializes `value` compactly, replacing invalid UTF-8 instead of throwing.
std::string DumpJson(const nlohmann::json& value);

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_CHECK_JSON_H_
