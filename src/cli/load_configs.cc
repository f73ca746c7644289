// Copyright tollgate authors.
#include "src/cli/load_configs.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/config/config_file.h"
#include "src/server/descriptor_matcher.h"
#include "tollgate/config.h"
#include "tollgate/limiter.h"

namespace tollgate::cli {

absl::StatusOr<LoadedConfigs> LoadConfigs(const std::vector<std::string>& paths) {
  LoadedConfigs loaded;
  // Every file is read even after one fails, so that one run names every error.
  std::vector<absl::Status> errors;
  absl::flat_hash_set<std::string> names;
  std::string memory_store_file;  // the file that set memory_store.max_keys
  for (const std::string& path : paths) {
    absl::StatusOr<std::string> text = config::ReadConfigFile(path, "--config ");
    if (!text.ok()) {
      errors.push_back(text.status());
      continue;
    }
    absl::StatusOr<ConfigKind> kind = DetectConfigKind(*text, path);
    if (!kind.ok()) {
      errors.push_back(kind.status());
      continue;
    }
    if (*kind == ConfigKind::kEnvoy) {
      absl::StatusOr<EnvoyDomainConfig> envoy = ParseEnvoyConfig(*text, path);
      if (!envoy.ok()) {
        errors.push_back(envoy.status());
        continue;
      }
      loaded.envoy_domains.push_back(*std::move(envoy));
      continue;
    }
    absl::StatusOr<Config> config = ParseConfig(*text, path);
    if (!config.ok()) {
      errors.push_back(config.status());
      continue;
    }
    if (config->memory_store_max_keys != 0) {
      if (!memory_store_file.empty()) {
        errors.push_back(absl::InvalidArgumentError(
            absl::StrCat(path, ": memory_store.max_keys: also set in ", memory_store_file,
                         "; set it in one --config file")));
      } else {
        memory_store_file = path;
        loaded.memory_store_max_keys = config->memory_store_max_keys;
      }
    }
    loaded.durable_positions.merge(config->durable_positions);
    for (Limit& limit : config->limits) {
      if (!names.insert(limit.name).second) {
        errors.push_back(absl::InvalidArgumentError(
            absl::StrCat(path, ": limits.", limit.name, ": defined in an earlier --config file")));
        continue;
      }
      loaded.limits.push_back(std::move(limit));
    }
  }
  if (errors.size() == 1) return errors.front();
  if (!errors.empty()) {
    return absl::InvalidArgumentError(
        absl::StrJoin(errors, "\n", [](std::string* out, const absl::Status& status) {
          absl::StrAppend(out, status.message());
        }));
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

absl::StatusOr<std::vector<std::string>> ListConfigDirectories(const std::vector<std::string>& dirs,
                                                               bool ignore_dotfiles) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  for (const std::string& dir : dirs) {
    std::error_code error;
    if (!fs::is_directory(dir, error)) {
      return absl::NotFoundError(absl::StrCat("config directory ", dir, ": ",
                                              error ? error.message() : "not a directory"));
    }
    std::vector<std::string> found;
    fs::recursive_directory_iterator it(dir, fs::directory_options::none, error);
    for (; !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
      const fs::path& path = it->path();
      if (ignore_dotfiles && path.filename().string().starts_with(".")) {
        if (it->is_directory(error)) it.disable_recursion_pending();
        continue;
      }
      std::error_code status_error;
      if (fs::is_regular_file(path, status_error)) found.push_back(path.string());
    }
    if (error) {
      return absl::NotFoundError(absl::StrCat("config directory ", dir, ": ", error.message()));
    }
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

}  // namespace tollgate::cli
