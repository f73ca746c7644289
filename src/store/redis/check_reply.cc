// Copyright tollgate authors.
#include "src/store/redis/check_reply.h"

#include <algorithm>
#include <optional>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "src/algorithm/fixed_window.h"
#include "src/algorithm/sliding_window.h"
#include "src/algorithm/token_bucket.h"
#include "src/core/absl_view.h"
#include "src/core/batch.h"
#include "src/store/redis/script_args.h"

namespace tollgate::redis {
namespace {

// A record's flags byte: bit 0 allowed, the rest 2 × reason. 255 starts an error record.
constexpr unsigned char kErrorRecord = 255;

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

// Reads the reply's records from the front of `rest`.
class RecordReader {
 public:
  explicit RecordReader(std::string_view bytes) : rest_(bytes) {}

  bool empty() const { return rest_.empty(); }
  std::optional<unsigned char> Peek() const {
    if (rest_.empty()) return std::nullopt;
    return static_cast<unsigned char>(rest_[0]);
  }
  std::optional<std::string_view> Bytes(size_t n) {
    if (rest_.size() < n) return std::nullopt;
    std::string_view out = rest_.substr(0, n);
    rest_.remove_prefix(n);
    return out;
  }
  std::optional<double> Double() {
    std::optional<std::string_view> bytes = Bytes(8);
    if (!bytes.has_value()) return std::nullopt;
    return ReadLittleEndianDouble(bytes->data());
  }
  // A count in decimal ('' none: 0), as Redis keeps it or Lua formats it.
  std::optional<int64_t> Count() {
    size_t n = 0;
    while (n < rest_.size() &&
           std::string_view("0123456789+-.eE").find(rest_[n]) != std::string_view::npos) {
      ++n;
    }
    const std::string_view text = rest_.substr(0, n);
    rest_.remove_prefix(n);
    if (text.empty()) return 0;
    int64_t count = 0;
    if (absl::SimpleAtoi(AbslView(text), &count)) return count;
    double value = 0;
    if (!absl::SimpleAtod(AbslView(text), &value)) return std::nullopt;
    return static_cast<int64_t>(value);
  }

 private:
  std::string_view rest_;
};

// The decision of rate limit item `item` on `state` at `now`, as the memory store's step
// makes it: a check's (or reservation's) of its cost; a charge's, or a settle's that found
// its reservation, a peek at what it left (Applied); a settle's that did not, a peek that
// says why. `Check(cost)` is the algorithm's check on `state`.
template <typename CheckFn>
Decision RateDecision(const CheckItem& item, unsigned char flags, CheckFn check) {
  Decision decision;
  switch (item.op) {
    case ItemOp::kCharge:
    case ItemOp::kSettle:
      decision = check(0);
      decision.allowed = (flags & 1) != 0;
      decision.reason = decision.allowed ? DenyReason::kNone : ReasonOf(flags);
      break;
    default:
      decision = check(item.cost);
      break;
  }
  decision.limit = item.limit->numbers.MaxCost();
  decision.source = DecisionSource::kRedis;
  return decision;
}

// Reads the record of rate limit item `item` and makes its decision; nullopt when the
// record does not parse. `agrees` is false when the script's verdict differs.
std::optional<Decision> ReadRateRecord(RecordReader& reader, const CheckItem& item, int64_t now,
                                       bool* agrees) {
  const std::optional<std::string_view> flag_byte = reader.Bytes(1);
  if (!flag_byte.has_value()) return std::nullopt;
  const auto flags = static_cast<unsigned char>((*flag_byte)[0]);
  const LimitNumbers& numbers = item.limit->numbers;
  std::optional<Decision> decision;
  switch (numbers.algorithm) {
    case Algorithm::kTokenBucket: {
      const std::optional<double> empty_at = reader.Double();
      if (!empty_at.has_value()) return std::nullopt;
      std::optional<algorithm::TokenBucketState> state;
      if (*empty_at != -std::numeric_limits<double>::infinity()) state = {*empty_at};
      const algorithm::TokenBucketParams params{numbers.capacity, numbers.refill_per_second};
      const algorithm::TokenBucketTimes times = algorithm::TokenBucketTimesFor(params);
      decision = RateDecision(item, flags, [&](int64_t cost) {
        return algorithm::TokenBucketCheck(state, now, params, times, cost).decision;
      });
      break;
    }
    case Algorithm::kFixedWindow: {
      const std::optional<int64_t> count = reader.Count();
      if (!count.has_value()) return std::nullopt;
      const algorithm::WindowParams params{numbers.limit, numbers.window_micros};
      const algorithm::FixedWindowState state{algorithm::WindowIndex(now, numbers.window_micros),
                                              *count};
      decision = RateDecision(item, flags, [&](int64_t cost) {
        return algorithm::FixedWindowCheck(state, now, params, cost).decision;
      });
      break;
    }
    case Algorithm::kSlidingWindow: {
      const std::optional<int64_t> current = reader.Count();
      const std::optional<std::string_view> comma = reader.Bytes(1);
      const std::optional<int64_t> previous = reader.Count();
      if (!current.has_value() || comma != "," || !previous.has_value()) return std::nullopt;
      const algorithm::WindowParams params{numbers.limit, numbers.window_micros};
      const algorithm::SlidingWindowState state{algorithm::WindowIndex(now, numbers.window_micros),
                                                *current, *previous};
      decision = RateDecision(item, flags, [&](int64_t cost) {
        return algorithm::SlidingWindowCheck(state, now, params, cost).decision;
      });
      break;
    }
    case Algorithm::kConcurrency:
      return std::nullopt;
  }
  *agrees = !IsConditional(item.op) || decision->allowed == ((flags & 1) != 0);
  return decision;
}

// A concurrency item's record, '<Bddd': flags, remaining (< 0: a debt), reset_after,
// retry_after.
std::optional<Decision> ReadConcurrencyRecord(RecordReader& reader, const CheckItem& item) {
  const std::optional<std::string_view> flag_byte = reader.Bytes(1);
  const std::optional<double> remaining = reader.Double();
  const std::optional<double> reset_after = reader.Double();
  const std::optional<double> retry_after = reader.Double();
  if (!retry_after.has_value()) return std::nullopt;
  const auto flags = static_cast<unsigned char>((*flag_byte)[0]);
  Decision decision;
  decision.allowed = (flags & 1) != 0;
  decision.reason = ReasonOf(flags);
  decision.limit = item.limit->numbers.MaxCost();
  // Every value is a whole number the script computed in doubles (exact below 2^53).
  const auto left = static_cast<int64_t>(*remaining);
  decision.remaining = std::max<int64_t>(left, 0);
  decision.debt = std::max<int64_t>(-left, 0);
  decision.reset_after_micros = static_cast<int64_t>(*reset_after);
  decision.retry_after_micros = static_cast<int64_t>(*retry_after);
  decision.source = DecisionSource::kRedis;
  return decision;
}

absl::Status Malformed(const RedisReply& reply) {
  return absl::InternalError(
      absl::StrCat("unexpected reply to the check script: ", DebugString(reply)));
}

}  // namespace

absl::StatusOr<CheckReply> ParseCheckReply(
    const RedisReply& reply, absl::Span<const std::vector<CheckItem>* const> requests) {
  if (reply.is_error()) {
    return absl::InternalError(absl::StrCat("Redis refused the check script: ", reply.str));
  }
  if (reply.type != RedisReply::Type::kString) return Malformed(reply);
  RecordReader reader(reply.str);
  const std::optional<double> now = reader.Double();
  if (!now.has_value()) return Malformed(reply);
  CheckReply out;
  out.now_micros = static_cast<int64_t>(*now);
  out.requests.reserve(requests.size());
  for (const std::vector<CheckItem>* request : requests) {
    if (reader.Peek() == kErrorRecord) {
      reader.Bytes(1);
      const std::optional<std::string_view> length = reader.Bytes(2);
      if (!length.has_value()) return Malformed(reply);
      const size_t size = static_cast<unsigned char>((*length)[0]) +
                          256 * static_cast<size_t>(static_cast<unsigned char>((*length)[1]));
      const std::optional<std::string_view> message = reader.Bytes(size);
      if (!message.has_value()) return Malformed(reply);
      out.requests.emplace_back(
          absl::InternalError(absl::StrCat("Redis refused the check: ", AbslView(*message))));
      continue;
    }
    std::vector<Decision> decisions;
    decisions.reserve(request->size());
    const CheckItem* disagreed = nullptr;
    for (const CheckItem& item : *request) {
      bool agrees = true;
      std::optional<Decision> decision =
          item.limit->numbers.algorithm == Algorithm::kConcurrency
              ? ReadConcurrencyRecord(reader, item)
              : ReadRateRecord(reader, item, out.now_micros, &agrees);
      if (!decision.has_value()) return Malformed(reply);
      if (!agrees && disagreed == nullptr) disagreed = &item;
      decisions.push_back(*decision);
    }
    if (disagreed != nullptr) {
      out.requests.emplace_back(absl::InternalError(
          absl::StrCat("check.lua and src/algorithm disagree on limit '", disagreed->limit->name,
                       "' (key '", disagreed->key, "')")));
      continue;
    }
    // The script reports an allowed item as if it were consumed.
    if (!internal::BatchAllowed(*request, decisions)) {
      internal::GiveBackUncharged(*request, absl::MakeSpan(decisions));
    }
    out.requests.emplace_back(std::move(decisions));
  }
  if (!reader.empty()) return Malformed(reply);
  return out;
}

}  // namespace tollgate::redis
