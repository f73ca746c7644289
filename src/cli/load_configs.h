// Copyright tollgate authors. Loading every --config file of `serve` and `validate`.
#ifndef TOLLGATE_SRC_CLI_LOAD_CONFIGS_H_
#define TOLLGATE_SRC_CLI_LOAD_CONFIGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/config/loaded_configs.h"

namespace tollgate::cli {

using ::tollgate::LoadedConfigs;

// Reads each file, tells the two formats apart by their top-level keys, and validates the
// whole: a limit name defined twice (in two files, or in both formats) is an error, and so
// is a domain given twice, and so is `memory_store.max_keys` set in more than one file.
// On failure the message names every error of every file, one line each ("FILE:LINE:COLUMN:
// FIELD: what was expected", or "FILE: ..." without a position; a directory says what to
// pass instead); checks across files that need every file valid run only when they all are.
// The status is the error's own (NotFound for a file that cannot be read) when there is one,
// InvalidArgument when there are several.
absl::StatusOr<LoadedConfigs> LoadConfigs(const std::vector<std::string>& paths);

// The config files of `dirs`, as envoyproxy/ratelimit reads its runtime directory: every
// regular file (a symbolic link to one is followed) in each directory and its
// subdirectories (a symbolic link to a directory is not followed), each directory's files
// sorted by path; with `ignore_dotfiles`, files and directories whose names start with '.'
// are skipped. NotFound naming a directory that cannot be read.
absl::StatusOr<std::vector<std::string>> ListConfigDirectories(const std::vector<std::string>& dirs,
                                                               bool ignore_dotfiles);

}  // namespace tollgate::cli

#endif  // TOLLGATE_SRC_CLI_LOAD_CONFIGS_H_
