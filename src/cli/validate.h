// Copyright tollgate authors. `tollgate validate`: check config files and exit.
#ifndef TOLLGATE_SRC_CLI_VALIDATE_H_
#define TOLLGATE_SRC_CLI_VALIDATE_H_

#include <string>
#include <vector>

namespace tollgate::cli {

// Loads `config_paths` as `serve` would (either format). Prints "FILES: ok, N limits" and
// returns 0, or prints the error (file, line, field) to stderr and returns 1.
int RunValidate(const std::vector<std::string>& config_paths);

}  // namespace tollgate::cli

#endif  // TOLLGATE_SRC_CLI_VALIDATE_H_
