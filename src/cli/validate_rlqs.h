// Copyright tollgate authors. What `tollgate validate` says of a config for Envoy's Rate Limit
// Quota Service (docs/envoy.md, "Buckets and rules"): a BucketId is matched as one descriptor
// of its pairs in key order, so a rule whose descriptor keys are not in that order can never
// be reached by a bucket; and, for `--rlqs-bucket`, which rule and limit a bucket counts
// against.
#ifndef TOLLGATE_SRC_CLI_VALIDATE_RLQS_H_
#define TOLLGATE_SRC_CLI_VALIDATE_RLQS_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "src/config/loaded_configs.h"

namespace tollgate::cli {

// One line per rule of `config`'s Envoy domains whose keys, from the top level down, are not
// in strictly increasing (bytewise) order, naming its file, line and keys. Such a rule still
// serves ShouldRateLimit.
std::vector<std::string> RlqsUnreachableRules(const LoadedConfigs& config);

// What the bucket `spec` ("DOMAIN:key=value,key=value", the pairs in any order) is assigned by
// `config`: "counted: rule R, limit L (N per window W), key K", "not limited (ALLOW_ALL)" or
// "blocked (DENY_ALL)". InvalidArgument for a spec without a domain, a pair without '=', or a
// BucketId RLQS refuses (no pair, an empty key); or a config that cannot be served.
absl::StatusOr<std::string> DescribeRlqsBucket(const LoadedConfigs& config, std::string_view spec);

}  // namespace tollgate::cli

#endif  // TOLLGATE_SRC_CLI_VALIDATE_RLQS_H_
