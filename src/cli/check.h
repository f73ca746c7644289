// Copyright tollgate authors. `tollgate check`: one check against a running service.
#ifndef TOLLGATE_SRC_CLI_CHECK_H_
#define TOLLGATE_SRC_CLI_CHECK_H_

#include <cstdint>
#include <string>

namespace tollgate::cli {

struct CheckOptions {
  // http://HOST:PORT of a `tollgate serve`.
  std::string url = "http://127.0.0.1:8080";
  std::string limit;
  std::string key;
  int64_t cost = 1;
};

// POSTs one check to URL/v1/check and prints the status line and the JSON reply.
// Returns 0 when allowed, 1 when refused (429 or 503), 2 on any error.
int RunCheck(const CheckOptions& options);

}  // namespace tollgate::cli

#endif  // TOLLGATE_SRC_CLI_CHECK_H_
