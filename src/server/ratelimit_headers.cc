// Copyright tollgate authors.
#include "src/server/ratelimit_headers.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tollgate::server {
namespace {

// Ceiling of a positive double to an int64, saturating instead of overflowing.
int64_t SaturatingCeil(double value) {
  if (!(value > 0)) return 0;
  if (value >= static_cast<double>(std::numeric_limits<int64_t>::max())) {
    return std::numeric_limits<int64_t>::max();
  }
  return static_cast<int64_t>(std::ceil(value));
}

// Calls `each(i)` for the first index of each distinct limit, `top`'s first, then in
// request order.
template <typename Each>
void ForEachDistinctLimit(absl::Span<const Limit* const> limits, size_t top, Each each) {
  each(top);
  for (size_t i = 0; i < limits.size(); ++i) {
    bool seen = limits[i] == limits[top];
    for (size_t j = 0; j < i && !seen; ++j) seen = limits[j] == limits[i];
    if (!seen) each(i);
  }
}

// StructuredFieldString(text), appended to `out`.
void AppendStructuredFieldString(std::string& out, std::string_view text) {
  out.push_back('"');
  const bool plain = std::all_of(text.begin(), text.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return byte >= 0x20 && byte <= 0x7e && c != '"' && c != '\\';
  });
  if (plain) {
    out.append(text);
    out.push_back('"');
    return;
  }
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (byte < 0x20 || byte > 0x7e) {
      out.push_back('?');
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
}

void AppendPolicyItem(std::string& out, const LimitNumbers& numbers) {
  if (numbers.algorithm == Algorithm::kConcurrency) {
    absl::StrAppend(&out, numbers.MaxCost());
    return;
  }
  absl::StrAppend(&out, numbers.MaxCost(), ";w=", PolicyWindowSeconds(numbers));
}

void AppendPolicyListItem(std::string& out, std::string_view name, const LimitNumbers& numbers) {
  AppendStructuredFieldString(out, name);
  if (numbers.algorithm == Algorithm::kConcurrency) {
    absl::StrAppend(&out, ";q=", numbers.MaxCost(), ";qu=\"concurrent-requests\"");
    return;
  }
  absl::StrAppend(&out, ";q=", numbers.MaxCost(), ";w=", PolicyWindowSeconds(numbers));
}

void AppendServiceLimitItem(std::string& out, std::string_view name, const Decision& decision) {
  AppendStructuredFieldString(out, name);
  absl::StrAppend(&out, ";r=", std::max<int64_t>(decision.remaining, 0),
                  ";t=", CeilSeconds(decision.reset_after_micros));
}

}  // namespace

std::optional<RateLimitHeaderFormat> ParseRateLimitHeaderFormat(std::string_view text) {
  if (text == "draft11" || text == "draft-11") return RateLimitHeaderFormat::kDraft11;
  if (text == "draft07" || text == "draft-07") return RateLimitHeaderFormat::kDraft07;
  if (text == "none") return RateLimitHeaderFormat::kNone;
  return std::nullopt;
}

std::string_view RateLimitHeaderFormatName(RateLimitHeaderFormat format) {
  switch (format) {
    case RateLimitHeaderFormat::kDraft11:
      return "draft11";
    case RateLimitHeaderFormat::kDraft07:
      return "draft07";
    case RateLimitHeaderFormat::kNone:
      return "none";
  }
  return "none";
}

int64_t CeilMillis(int64_t micros) { return micros <= 0 ? 0 : (micros - 1) / 1000 + 1; }

int64_t CeilSeconds(int64_t micros) { return micros <= 0 ? 0 : (micros - 1) / 1'000'000 + 1; }

std::string StructuredFieldString(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  AppendStructuredFieldString(out, text);
  return out;
}

const LimitNumbers& DecidingNumbers(const Limit& limit, const Decision& decision) {
  if (decision.source == DecisionSource::kFallback &&
      limit.on_store_failure == FailureMode::kLocal && limit.local.has_value()) {
    return *limit.local;
  }
  return limit.numbers;
}

int64_t PolicyWindowSeconds(const LimitNumbers& numbers) {
  int64_t window_seconds = 0;
  if (numbers.algorithm == Algorithm::kTokenBucket) {
    window_seconds =
        numbers.refill_per_second > 0
            ? SaturatingCeil(static_cast<double>(numbers.capacity) / numbers.refill_per_second)
            : 0;
  } else {
    window_seconds = CeilSeconds(numbers.window_micros);
  }
  return std::max<int64_t>(window_seconds, 1);
}

std::string PolicyItem(const LimitNumbers& numbers) {
  std::string out;
  AppendPolicyItem(out, numbers);
  return out;
}

std::string RateLimitField(const Decision& decision) {
  return absl::StrCat("limit=", decision.limit,
                      ", remaining=", std::max<int64_t>(decision.remaining, 0),
                      ", reset=", CeilSeconds(decision.reset_after_micros));
}

std::string PolicyListItem(std::string_view name, const LimitNumbers& numbers) {
  std::string out;
  AppendPolicyListItem(out, name, numbers);
  return out;
}

std::string ServiceLimitItem(std::string_view name, const Decision& decision) {
  std::string out;
  AppendServiceLimitItem(out, name, decision);
  return out;
}

RateLimitFields RateLimitHeaderFields(RateLimitHeaderFormat format,
                                      absl::Span<const Limit* const> limits,
                                      absl::Span<const Decision> decisions, size_t top) {
  RateLimitFields fields;
  if (format == RateLimitHeaderFormat::kNone) return fields;
  // Room for the usual answer (one item: a name and a few numbers), so that each field of it
  // takes one allocation, not one per doubling.
  fields.policy.reserve(64);
  fields.rate_limit.reserve(64);
  // Each item is appended in place: a request's fields cost their two strings.
  auto separate = [](std::string& out) {
    if (!out.empty()) out += ", ";
  };
  if (format == RateLimitHeaderFormat::kDraft07) {
    ForEachDistinctLimit(limits, top, [&](size_t i) {
      separate(fields.policy);
      AppendPolicyItem(fields.policy, DecidingNumbers(*limits[i], decisions[i]));
    });
    fields.rate_limit = RateLimitField(decisions[top]);
    return fields;
  }
  ForEachDistinctLimit(limits, top, [&](size_t first) {
    // The item of this limit with the least left speaks for it (`top` for its own limit).
    size_t speaking = first;
    if (first != top) {
      for (size_t i = first + 1; i < limits.size(); ++i) {
        if (limits[i] == limits[first] && decisions[i].remaining < decisions[speaking].remaining) {
          speaking = i;
        }
      }
    }
    const Limit& limit = *limits[speaking];
    separate(fields.policy);
    AppendPolicyListItem(fields.policy, limit.name, DecidingNumbers(limit, decisions[speaking]));
    separate(fields.rate_limit);
    AppendServiceLimitItem(fields.rate_limit, limit.name, decisions[speaking]);
  });
  return fields;
}

std::optional<int64_t> RetryAfterSeconds(const Decision& decision) {
  if (decision.allowed || decision.retry_after_micros <= 0) return std::nullopt;
  return std::max<int64_t>(CeilSeconds(decision.retry_after_micros), 1);
}

std::optional<XRateLimitFields> XRateLimitHeaderFields(
    absl::Span<const DescriptorLimitStatus> statuses) {
  if (statuses.empty()) return std::nullopt;
  const DescriptorLimitStatus* least = &statuses[0];
  std::string policies;
  for (const DescriptorLimitStatus& status : statuses) {
    if (status.limit_remaining < least->limit_remaining) least = &status;
    absl::StrAppend(&policies, ", ", status.requests_per_unit, ";w=", status.unit_seconds);
    if (!status.name.empty())
      absl::StrAppend(&policies, ";name=", StructuredFieldString(status.name));
  }
  XRateLimitFields fields;
  fields.limit = absl::StrCat(least->requests_per_unit, policies);
  fields.remaining = absl::StrCat(least->limit_remaining);
  fields.reset = absl::StrCat(least->reset_seconds);
  return fields;
}

}  // namespace tollgate::server
