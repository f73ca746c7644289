// Copyright tollgate authors.
#include "src/cli/config_reloader.h"

#include <sys/stat.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "spdlog/spdlog.h"
#include "src/cli/load_configs.h"

namespace tollgate::cli {

absl::StatusOr<std::vector<std::string>> ConfigFiles(const ServeOptions& options) {
  std::vector<std::string> files = options.config_paths;
  if (options.config_dirs.empty()) return files;
  absl::StatusOr<std::vector<std::string>> listed =
      ListConfigDirectories(options.config_dirs, options.config_ignore_dotfiles);
  if (!listed.ok()) return listed.status();
  files.insert(files.end(), listed->begin(), listed->end());
  return files;
}

std::vector<FileVersion> FileVersions(const std::vector<std::string>& paths) {
  std::vector<FileVersion> versions;
  for (const std::string& path : paths) {
    struct stat info {};
    FileVersion version;
    version.path = path;
    if (stat(path.c_str(), &info) == 0) {
      version.mtime_nanos =
          static_cast<int64_t>(info.st_mtim.tv_sec) * 1'000'000'000 + info.st_mtim.tv_nsec;
      version.size = info.st_size;
      version.inode = info.st_ino;
    }
    versions.push_back(version);
  }
  return versions;
}

Reloader::Reloader(const ServeOptions& options, server::Metrics& metrics,
                   server::CheckService& service, std::vector<FileVersion> versions,
                   int64_t memory_store_max_keys, bool given_memory_max_keys)
    : options_(options),
      metrics_(metrics),
      service_(service),
      given_memory_max_keys_(given_memory_max_keys),
      versions_(std::move(versions)),
      memory_store_max_keys_(memory_store_max_keys) {}

void Reloader::Reload(std::string_view why) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::vector<std::string>> files = ConfigFiles(options_);
  versions_ = files.ok() ? FileVersions(*files) : std::vector<FileVersion>();
  absl::StatusOr<LoadedConfigs> config =
      files.ok() ? LoadConfigs(*files) : absl::StatusOr<LoadedConfigs>(files.status());
  const size_t limits = config.ok() ? config->limits.size() : 0;
  const size_t domains = config.ok() ? config->envoy_domains.size() : 0;
  const int64_t memory_store_max_keys = config.ok() ? config->memory_store_max_keys : 0;
  absl::Status status = config.ok() ? service_.Reload(*std::move(config)) : config.status();
  if (!status.ok()) {
    metrics_.RecordReload(false);
    // One record per error (LoadConfigs reports each on a line of its own).
    for (absl::string_view line : absl::StrSplit(status.message(), '\n')) {
      spdlog::error("config reload ({}) refused, the old config keeps serving: {}", why,
                    std::string(line));
    }
    return;
  }
  metrics_.RecordReload(true);
  spdlog::info("config reloaded ({}): {} limits and {} Envoy domains", why, limits, domains);
  if (memory_store_max_keys != memory_store_max_keys_) {
    spdlog::warn(
        "memory_store.max_keys changed in the config; the store keeps its cap of {} keys "
        "until a restart{}",
        options_.memory_max_keys,
        given_memory_max_keys_ ? " (and --memory-max-keys overrides the config's)" : "");
    memory_store_max_keys_ = memory_store_max_keys;
  }
}

void Reloader::ReloadIfChanged() {
  absl::StatusOr<std::vector<std::string>> files = ConfigFiles(options_);
  std::vector<FileVersion> now = files.ok() ? FileVersions(*files) : std::vector<FileVersion>();
  {
    absl::MutexLock lock(&mu_);
    if (now == versions_) return;
  }
  Reload("a config file changed");
}

}  // namespace tollgate::cli
