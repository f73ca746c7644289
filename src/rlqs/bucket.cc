// Copyright tollgate authors.
#include "src/rlqs/bucket.h"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/core/absl_view.h"
#include "src/server/rls_plan.h"

namespace tollgate::rlqs {

namespace {

// Views of `entries`' pairs, valid while `entries` is.
std::vector<DescriptorEntry> ViewOf(const BucketEntries& entries) {
  std::vector<DescriptorEntry> view;
  view.reserve(entries.size());
  for (const auto& [key, value] : entries) view.push_back({key, value});
  return view;
}

}  // namespace

absl::Status ReadBucketEntries(const BucketId& bucket, std::string_view field, BucketEntries* out) {
  out->clear();
  if (bucket.bucket().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(AbslView(field), ": a BucketId needs at least one pair"));
  }
  out->reserve(bucket.bucket().size());
  for (const auto& [key, value] : bucket.bucket()) {
    if (key.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(AbslView(field), ".bucket: a key is empty (value \"", value, "\")"));
    }
    out->emplace_back(key, value);
  }
  std::sort(out->begin(), out->end());
  return absl::OkStatus();
}

std::string BucketKey(const BucketEntries& entries) {
  return server::DescriptorKey(ViewOf(entries));
}

absl::StatusOr<BucketTarget> MatchBucket(std::string_view domain, const BucketEntries& entries,
                                         const DescriptorMatcher& matcher, const Limiter& limiter) {
  BucketTarget target;
  if (!matcher.HasDomain(domain)) return target;
  const std::vector<DescriptorEntry> view = ViewOf(entries);
  std::vector<std::string_view> counted_values;
  const EnvoyRule* rule = matcher.Match(domain, view, &counted_values);
  if (rule == nullptr || rule->rate_limit.unlimited) return target;
  target.rule = rule->full_key;
  if (rule->limit_name.empty()) {
    target.kind = BucketTarget::Kind::kBlocked;
    return target;
  }
  target.limit = limiter.FindLimit(rule->limit_name);
  if (target.limit == nullptr) {
    return absl::InternalError(absl::StrCat("rule ", rule->full_key, " has no limit"));
  }
  target.key = server::DescriptorKey(view, counted_values);
  target.on_store_failure = rule->rate_limit.rlqs_on_store_failure.value_or(
      target.limit->on_store_failure == FailureMode::kFailClosed ? RlqsStoreFailure::kFailClosed
                                                                 : RlqsStoreFailure::kFailOpen);
  if (target.key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a bucket's pairs are ", target.key.size(),
                                                   " bytes, more than ", kMaxKeyBytes));
  }
  target.kind = BucketTarget::Kind::kCounted;
  return target;
}

LimitNumbers RlqsWindowNumbers(const LimitNumbers& numbers) {
  if (numbers.algorithm != Algorithm::kTokenBucket) return numbers;
  LimitNumbers window;
  window.algorithm = Algorithm::kFixedWindow;
  window.limit = std::max<int64_t>(1, numbers.capacity);
  const double seconds = numbers.refill_per_second > 0
                             ? static_cast<double>(window.limit) / numbers.refill_per_second
                             : 1.0;
  window.window_micros = std::max<int64_t>(1'000'000, std::llround(seconds * 1e6));
  return window;
}

}  // namespace tollgate::rlqs
