// Copyright tollgate authors.
#include "src/cli/validate.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/cli/load_configs.h"
#include "src/cli/validate_rlqs.h"

namespace tollgate::cli {

int RunValidate(const std::vector<std::string>& config_paths,
                const std::vector<std::string>& rlqs_buckets) {
  absl::StatusOr<LoadedConfigs> loaded = LoadConfigs(config_paths);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", std::string(loaded.status().message()).c_str());
    return 1;
  }
  const size_t limits = loaded->limits.size();
  const size_t domains = loaded->envoy_domains.size();
  std::string summary = absl::StrCat(limits, limits == 1 ? " limit" : " limits");
  if (domains > 0) absl::StrAppend(&summary, ", ", domains, domains == 1 ? " domain" : " domains");
  std::printf("%s: ok, %s\n", absl::StrJoin(config_paths, ", ").c_str(), summary.c_str());
  for (const std::string& note : RlqsUnreachableRules(*loaded)) {
    std::fprintf(stderr, "note: %s\n", note.c_str());
  }
  for (const std::string& spec : rlqs_buckets) {
    absl::StatusOr<std::string> bucket = DescribeRlqsBucket(*loaded, spec);
    if (!bucket.ok()) {
      std::fprintf(stderr, "%s\n", std::string(bucket.status().message()).c_str());
      return 1;
    }
    std::printf("%s\n", bucket->c_str());
  }
  return 0;
}

}  // namespace tollgate::cli
