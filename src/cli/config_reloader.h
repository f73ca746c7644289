// Copyright tollgate authors. `tollgate serve`'s config reloads: on SIGHUP, and when a
// config file changes.
#ifndef TOLLGATE_SRC_CLI_CONFIG_RELOADER_H_
#define TOLLGATE_SRC_CLI_CONFIG_RELOADER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "src/cli/serve.h"
#include "src/server/check_service.h"
#include "src/server/metrics.h"

namespace tollgate::cli {

// What identifies a version of a file: a rewrite changes the mtime or the size, a
// replace-by-rename the inode (a Kubernetes ConfigMap's swap of its ..data link too: stat
// follows the links). All zero when the file cannot be read.
struct FileVersion {
  std::string path;
  int64_t mtime_nanos = 0;
  int64_t size = 0;
  uint64_t inode = 0;
  bool operator==(const FileVersion&) const = default;
};

// The --config files, then the files of the --config-dir directories as they are now.
absl::StatusOr<std::vector<std::string>> ConfigFiles(const ServeOptions& options);

std::vector<FileVersion> FileVersions(const std::vector<std::string>& paths);

// Reloads every --config file into the running servers. Thread-safe (SIGHUP and the file
// poller may both ask).
class Reloader {
 public:
  // `memory_store_max_keys`: the config's memory_store.max_keys at start; `given_memory_max_keys`:
  // whether --memory-max-keys overrode it. REQUIRES: the arguments outlive this object.
  Reloader(const ServeOptions& options, server::Metrics& metrics, server::CheckService& service,
           std::vector<FileVersion> versions, int64_t memory_store_max_keys,
           bool given_memory_max_keys);

  // Loads and validates all files; a valid whole replaces the running config (HTTP and
  // Envoy's alike, in one swap), an invalid one is logged and the old config keeps serving.
  void Reload(std::string_view why);

  // Reloads when a file's version differs from the last one loaded.
  void ReloadIfChanged();

 private:
  const ServeOptions& options_;
  server::Metrics& metrics_;
  server::CheckService& service_;
  absl::Mutex mu_;  // one reload at a time
  const bool given_memory_max_keys_;
  std::vector<FileVersion> versions_ ABSL_GUARDED_BY(mu_);
  // The config's memory_store.max_keys last loaded (the store's cap is set at start only).
  int64_t memory_store_max_keys_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tollgate::cli

#endif  // TOLLGATE_SRC_CLI_CONFIG_RELOADER_H_
