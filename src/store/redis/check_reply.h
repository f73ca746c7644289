// Copyright tollgate authors. Decisions out of lua/check.lua's binary reply.
#ifndef TOLLGATE_SRC_STORE_REDIS_CHECK_REPLY_H_
#define TOLLGATE_SRC_STORE_REDIS_CHECK_REPLY_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "src/store/redis/resp.h"
#include "tollgate/decision.h"
#include "tollgate/store.h"

namespace tollgate::redis {

// What one call of check.lua answered.
struct CheckReply {
  // The script's time (Redis TIME, or the time a test pinned).
  int64_t now_micros = 0;
  // Per request, in order: its decisions, or why it failed alone (InternalError naming what
  // Redis found: a counter that holds no count, a key of another type).
  std::vector<absl::StatusOr<std::vector<Decision>>> requests;
};

// The answer to check.lua's call for `requests` (CheckCommand), out of its reply. A rate
// limit's decision is computed from the state the script decided on, with src/algorithm's
// functions, as the memory store computes it; the script's own verdict on each check must be
// the same, else that request fails (InternalError). When a request was refused, its allowed
// conditional items get their cost back in `remaining` (internal::GiveBackUncharged).
// InternalError for an error reply (the script failed, or a request alone did) or a reply
// that does not parse.
absl::StatusOr<CheckReply> ParseCheckReply(
    const RedisReply& reply, absl::Span<const std::vector<CheckItem>* const> requests);

}  // namespace tollgate::redis

#endif  // TOLLGATE_SRC_STORE_REDIS_CHECK_REPLY_H_
