// Copyright tollgate authors. `tollgate validate`: check config files and exit.
#ifndef TOLLGATE_SRC_CLI_VALIDATE_H_
#define TOLLGATE_SRC_CLI_VALIDATE_H_

#include <string>
#include <vector>

namespace tollgate::cli {

// Loads `config_paths` as `serve` would (either format). Prints "FILES: ok, N limits" and
// returns 0, or prints the error (file, line, field) to stderr and returns 1. Rules no Rate
// Limit Quota Service bucket can reach are noted on stderr (validate_rlqs.h); each of
// `rlqs_buckets` ("DOMAIN:key=value,...") is printed with what it counts against (1 when one
// is not a valid bucket).
int RunValidate(const std::vector<std::string>& config_paths,
                const std::vector<std::string>& rlqs_buckets = {});

}  // namespace tollgate::cli

#endif  // TOLLGATE_SRC_CLI_VALIDATE_H_
