// Copyright tollgate authors. `tollgate check`: one request to a running service, in any of
// its forms: one limit, several limits at once (all or nothing), or Envoy's descriptors.
#ifndef TOLLGATE_SRC_CLI_CHECK_H_
#define TOLLGATE_SRC_CLI_CHECK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tollgate::cli {

struct CheckOptions {
  // http://HOST:PORT of a `tollgate serve`.
  std::string url = "http://127.0.0.1:8080";
  // POST /v1/check: one item per limit, in order. `keys`: one (every limit's key) or one per
  // limit. `costs`: none (each 1), one (every item's), or one per limit; 0 peeks.
  std::vector<std::string> limits;
  std::vector<std::string> keys;
  std::vector<int64_t> costs;
  // POST /json (Envoy's shape) instead, when `domain` is set: one descriptor per entry of
  // `descriptors`, each "key=value[,key=value...]" (a key alone, "key", has an empty value);
  // `costs` then has at most one number: the request's hits_addend, or 0 to peek (each
  // descriptor's hits_addend 0: checked, not counted).
  std::string domain;
  std::vector<std::string> descriptors;
};

// The request `options` describe: its path ("/v1/check" or "/json") and JSON body.
// InvalidArgument, naming the option, for a combination that describes no request.
struct CheckRequest {
  std::string path;
  std::string body;
};
absl::StatusOr<CheckRequest> BuildCheckRequest(const CheckOptions& options);

// Sends the request of `options` and prints the status line, the rate-limit headers
// (RateLimit-Policy, RateLimit, Retry-After, X-RateLimit-*) and the JSON reply.
// Returns 0 when allowed (200), 1 when refused (429 or 503), 2 on any error (printed).
int RunCheck(const CheckOptions& options);

}  // namespace tollgate::cli

#endif  // TOLLGATE_SRC_CLI_CHECK_H_
