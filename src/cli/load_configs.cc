// Copyright tollgate authors.
#include "src/cli/load_configs.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "src/config/descriptor_matcher.h"
#include "tollgate/config.h"
#include "tollgate/limiter.h"

namespace tollgate::cli {

absl::StatusOr<LoadedConfigs> LoadConfigs(const std::vector<std::string>& paths) {
  LoadedConfigs loaded;
  absl::flat_hash_set<std::string> names;
  std::string memory_store_file;  // the file that set memory_store.max_keys
  for (const std::string& path : paths) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read the file"));
    std::stringstream text;
    text << in.rdbuf();
    absl::StatusOr<ConfigKind> kind = DetectConfigKind(text.str(), path);
    if (!kind.ok()) return kind.status();
    if (*kind == ConfigKind::kEnvoy) {
      absl::StatusOr<EnvoyDomainConfig> envoy = ParseEnvoyConfig(text.str(), path);
      if (!envoy.ok()) return envoy.status();
      loaded.envoy_domains.push_back(*std::move(envoy));
      continue;
    }
    absl::StatusOr<Config> config = ParseConfig(text.str(), path);
    if (!config.ok()) return config.status();
    if (config->memory_store_max_keys != 0) {
      if (!memory_store_file.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": memory_store.max_keys: also set in ", memory_store_file,
                         "; set it in one --config file"));
      }
      memory_store_file = path;
      loaded.memory_store_max_keys = config->memory_store_max_keys;
    }
    for (Limit& limit : config->limits) {
      if (!names.insert(limit.name).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": limits.", limit.name, ": defined in an earlier --config file"));
      }
      loaded.limits.push_back(std::move(limit));
    }
  }
  // The Envoy rules compile into limits that share the store with ours: names must differ.
  absl::StatusOr<std::unique_ptr<DescriptorMatcher>> matcher =
      DescriptorMatcher::Create(loaded.envoy_domains);
  if (!matcher.ok()) return matcher.status();
  for (const Limit& rule : (*matcher)->limits()) {
    if (names.contains(rule.name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "limit name '", rule.name, "' is used both by a limits: file and an Envoy rule"));
    }
  }
  // What serve does next, so that "ok" means the service would start.
  absl::StatusOr<std::unique_ptr<Limiter>> limiter = Limiter::Create(
      {.limits = loaded.limits, .store = nullptr, .sync_store = nullptr, .clock = nullptr});
  if (!limiter.ok()) return limiter.status();
  return loaded;
}

}  // namespace tollgate::cli
