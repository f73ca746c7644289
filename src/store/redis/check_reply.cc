// Copyright tollgate authors.
#include "src/store/redis/check_reply.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "src/core/batch.h"
#include "src/store/redis/script_args.h"

namespace tollgate::redis {
namespace {

// Bytes per item in the script's reply ('<Bddd': flags, remaining, reset_after,
// retry_after), after the leading now_micros ('<d').
constexpr size_t kReplyBytesPerItem = 1 + 3 * 8;

DenyReason ReasonOf(unsigned char flags) {
  switch (flags >> 1) {
    case 0:
      return DenyReason::kNone;
    case 1:
      return DenyReason::kOverLimit;
    case 2:
      return DenyReason::kCostExceedsLimit;
    case 3:
      return DenyReason::kNotFound;
    default:
      return DenyReason::kAlreadySettled;
  }
}

}  // namespace

absl::StatusOr<std::vector<Decision>> ParseCheckReply(const RedisReply& reply,
                                                      const std::vector<CheckItem>& items,
                                                      int64_t* now_micros) {
  if (reply.is_error()) {
    return absl::InternalError(absl::StrCat("Redis refused the check script: ", reply.str));
  }
  if (reply.type != RedisReply::Type::kString ||
      reply.str.size() != 8 + kReplyBytesPerItem * items.size()) {
    return absl::InternalError(
        absl::StrCat("unexpected reply to the check script: ", DebugString(reply)));
  }
  // Every value is a whole number the script computed in doubles (exact below 2^53).
  const char* cursor = reply.str.data();
  auto next = [&cursor] {
    const double value = ReadLittleEndianDouble(cursor);
    cursor += 8;
    return static_cast<int64_t>(value);
  };
  const int64_t now = next();
  if (now_micros != nullptr) *now_micros = now;
  std::vector<Decision> decisions;
  decisions.reserve(items.size());
  for (const CheckItem& item : items) {
    const auto flags = static_cast<unsigned char>(*cursor++);
    Decision decision;
    decision.allowed = (flags & 1) != 0;
    decision.limit = item.limit->numbers.MaxCost();
    const int64_t remaining = next();  // negative: a debt
    decision.remaining = std::max<int64_t>(remaining, 0);
    decision.debt = std::max<int64_t>(-remaining, 0);
    decision.reset_after_micros = next();
    decision.retry_after_micros = next();
    decision.source = DecisionSource::kRedis;
    decision.reason = ReasonOf(flags);
    decisions.push_back(decision);
  }
  // check.lua reports an allowed item's remaining as if it were consumed.
  if (!internal::BatchAllowed(items, decisions)) {
    internal::GiveBackUncharged(items, absl::MakeSpan(decisions));
  }
  return decisions;
}

}  // namespace tollgate::redis
