// Copyright tollgate authors. Reading a config file, with messages that say what to pass.
#ifndef TOLLGATE_SRC_CONFIG_CONFIG_FILE_H_
#define TOLLGATE_SRC_CONFIG_CONFIG_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tollgate::config {

// The bytes of the file at `path`. On failure NotFound, the message starting "PATH: ":
// "no such file", the system's reason, or, for a directory, "is a directory, expected a
// config file" and what to pass instead: (up to three of) the .yaml/.yml files it holds,
// each after `flag` ("--config " on the command line, empty for a library call).
absl::StatusOr<std::string> ReadConfigFile(const std::string& path, absl::string_view flag);

}  // namespace tollgate::config

#endif  // TOLLGATE_SRC_CONFIG_CONFIG_FILE_H_
