// Copyright tollgate authors.
#include "src/cli/validate_rlqs.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "src/core/absl_view.h"
#include "src/rlqs/bucket.h"
#include "src/server/check_service.h"

namespace tollgate::cli {

namespace {

void Walk(const EnvoyDomainConfig& domain, const std::vector<EnvoyDescriptor>& descriptors,
          std::vector<std::string>& keys, std::vector<std::string>& out) {
  for (const EnvoyDescriptor& descriptor : descriptors) {
    keys.push_back(descriptor.key);
    const bool ordered = keys.size() < 2 || keys[keys.size() - 2] < keys.back();
    if (!ordered) {
      if (descriptor.rate_limit.has_value()) {
        out.push_back(absl::StrCat(domain.file_name, ":", descriptor.line, ": domain ",
                                   domain.domain, ": the rule of keys ", absl::StrJoin(keys, ", "),
                                   " is not in key order: no RLQS bucket can match it (a "
                                   "BucketId's pairs are matched in key order)"));
      }
    }
    // Deeper rules under an out-of-order key are unreachable too, and said so once each.
    Walk(domain, descriptor.descriptors, keys, out);
    keys.pop_back();
  }
}

}  // namespace

std::vector<std::string> RlqsUnreachableRules(const LoadedConfigs& config) {
  std::vector<std::string> out;
  std::vector<std::string> keys;
  for (const EnvoyDomainConfig& domain : config.envoy_domains) {
    Walk(domain, domain.descriptors, keys, out);
  }
  return out;
}

absl::StatusOr<std::string> DescribeRlqsBucket(const LoadedConfigs& config, std::string_view spec) {
  const size_t colon = spec.find(':');
  if (colon == std::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(absl::StrCat("--rlqs-bucket ", AbslView(spec),
                                                   ": expected DOMAIN:key=value[,key=value...]"));
  }
  const std::string domain(spec.substr(0, colon));
  rlqs::BucketId id;
  for (absl::string_view pair : absl::StrSplit(AbslView(spec.substr(colon + 1)), ',')) {
    const size_t equals = pair.find('=');
    if (equals == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("--rlqs-bucket ", AbslView(spec), ": pair '", pair, "' has no '='"));
    }
    (*id.mutable_bucket())[std::string(pair.substr(0, equals))] =
        std::string(pair.substr(equals + 1));
  }
  rlqs::BucketEntries entries;
  if (absl::Status read = rlqs::ReadBucketEntries(id, "--rlqs-bucket", &entries); !read.ok()) {
    return read;
  }
  absl::StatusOr<std::unique_ptr<server::CheckService>> service =
      server::CheckService::Create({}, config);
  if (!service.ok()) return service.status();
  std::shared_ptr<const server::CheckSnapshot> snapshot = (*service)->snapshot();
  absl::StatusOr<rlqs::BucketTarget> target =
      rlqs::MatchBucket(domain, entries, *snapshot->matcher, *snapshot->limiter);
  if (!target.ok()) return target.status();
  const std::string bucket = absl::StrCat("bucket {", rlqs::BucketKey(entries), "} in ", domain);
  switch (target->kind) {
    case rlqs::BucketTarget::Kind::kNotLimited:
      return absl::StrCat(bucket, ": not limited (ALLOW_ALL)");
    case rlqs::BucketTarget::Kind::kBlocked:
      return absl::StrCat(bucket, ": blocked by rule ", target->rule, " (DENY_ALL)");
    case rlqs::BucketTarget::Kind::kCounted:
      break;
  }
  const LimitNumbers numbers = rlqs::RlqsWindowNumbers(target->limit->numbers);
  return absl::StrCat(bucket, ": counted by rule ", target->rule, ", ", numbers.limit, " per ",
                      numbers.window_micros / 1'000'000, " s window, key ", target->key);
}

}  // namespace tollgate::cli
