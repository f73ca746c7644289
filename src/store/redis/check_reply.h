// Copyright tollgate authors. Decisions out of lua/check.lua's binary reply.
#ifndef TOLLGATE_SRC_STORE_REDIS_CHECK_REPLY_H_
#define TOLLGATE_SRC_STORE_REDIS_CHECK_REPLY_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "src/store/redis/resp.h"
#include "tollgate/decision.h"
#include "tollgate/store.h"

namespace tollgate::redis {

// The script's answer for `items`, out of its reply (one string: now_micros, then per item
// '<Bddd' flags, remaining, reset_after, retry_after; see lua/check.lua). When the batch was
// refused, its allowed conditional items get their cost back in `remaining`
// (internal::GiveBackUncharged). `now_micros`, when given, receives the script's time.
// InternalError for an error reply or a malformed one.
absl::StatusOr<std::vector<Decision>> ParseCheckReply(const RedisReply& reply,
                                                      const std::vector<CheckItem>& items,
                                                      int64_t* now_micros = nullptr);

}  // namespace tollgate::redis

#endif  // TOLLGATE_SRC_STORE_REDIS_CHECK_REPLY_H_
