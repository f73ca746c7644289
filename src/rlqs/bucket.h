// Copyright tollgate authors. The Rate Limit Quota Service's buckets: what Envoy's BucketId
// is in tollgate's terms.
//
// A BucketId (a map of strings) is read as ONE descriptor of the stream's domain whose entries
// are its key/value pairs in key order (bytewise): {name: api, user: 42} is the descriptor
// [(name, api), (user, 42)]. That descriptor is matched against the domain's Envoy-format
// rules exactly as ShouldRateLimit matches a request's descriptor (src/config/
// descriptor_matcher.h), and is counted under the same limit and store key, so RLQS and RLS
// share the same counters. A bucket no rule matches, a rule that is `unlimited`, and an
// unknown domain are not limited (ALLOW_ALL); a rule of requests_per_unit 0 denies all.
//
// Pure: no I/O, no clock. Thread-safe (no state).
#ifndef TOLLGATE_SRC_SERVER_RLQS_BUCKET_H_
#define TOLLGATE_SRC_SERVER_RLQS_BUCKET_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "envoy/service/rate_limit_quota/v3/rlqs.pb.h"
#include "src/server/descriptor_matcher.h"
#include "tollgate/limit.h"
#include "tollgate/limiter.h"

namespace tollgate::rlqs {

using BucketId = envoy::service::rate_limit_quota::v3::BucketId;

// A BucketId's pairs in key order.
using BucketEntries = std::vector<std::pair<std::string, std::string>>;

// The pairs of `bucket` sorted by key. InvalidArgument naming `field` (such as
// "bucket_quota_usages[3].bucket_id") when it has no pair or a pair with an empty key.
absl::Status ReadBucketEntries(const BucketId& bucket, std::string_view field, BucketEntries* out);

// One string per bucket, equal for equal BucketIds whatever their order: the store key's
// layout ("k=v,k=v", percent-encoded), which never gives two different BucketIds one string.
std::string BucketKey(const BucketEntries& entries);

// What a bucket is limited by.
struct BucketTarget {
  enum class Kind {
    kNotLimited,  // no rule, `unlimited`, or an unknown domain: ALLOW_ALL
    kBlocked,     // requests_per_unit 0: DENY_ALL
    kCounted,     // counted against `limit` under `key`
  };
  Kind kind = Kind::kNotLimited;
  // kCounted: the limit (lives as long as the limiter it was found in), the store key (the
  // descriptor's, with a share_threshold wildcard in place of the values it matched), and
  // the rule's full key for messages.
  const Limit* limit = nullptr;
  std::string key;
  std::string rule;
  // kCounted: what its buckets are assigned while Redis is away (the rule's
  // rlqs_on_store_failure, else as its on_store_failure).
  RlqsStoreFailure on_store_failure = RlqsStoreFailure::kFailOpen;
};

// The target of the bucket `entries` in `domain`. InternalError when a counting rule has no
// limit in `limiter` (a matcher and a limiter of different snapshots); InvalidArgument when the
// store key is longer than kMaxKeyBytes.
absl::StatusOr<BucketTarget> MatchBucket(std::string_view domain, const BucketEntries& entries,
                                         const DescriptorMatcher& matcher, const Limiter& limiter);

// The numbers a limit is enforced with over RLQS: a fixed or sliding window as it is; a token
// bucket as a fixed window of `capacity` requests every capacity / refill_per_second (at
// least one second), which is what an Envoy rule's token bucket is per unit. Envoy's token
// buckets then carry each share; the window's counter in Redis keeps the fleet's total.
LimitNumbers RlqsWindowNumbers(const LimitNumbers& numbers);

}  // namespace tollgate::rlqs

#endif  // TOLLGATE_SRC_SERVER_RLQS_BUCKET_H_
