// Copyright tollgate authors.
#include "src/cli/instance_group.h"

#include <openssl/sha.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tollgate::cli {

std::string InstanceGroup(const LoadedConfigs& config) {
  std::vector<std::string> names;
  for (const Limit& limit : config.limits) names.push_back(absl::StrCat("limit:", limit.name));
  for (const EnvoyDomainConfig& domain : config.envoy_domains) {
    names.push_back(absl::StrCat("domain:", domain.domain));
  }
  std::sort(names.begin(), names.end());
  const std::string joined = absl::StrJoin(names, "\n");
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(joined.data()), joined.size(), digest);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), 8));  // 64 bits name a group
}

}  // namespace tollgate::cli
