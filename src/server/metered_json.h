// Copyright tollgate authors. The JSON of the metered endpoints that do not take /v1/check's
// body (src/server/check_json.h): POST /v1/settle, POST /v1/release and POST /v1/renew.
//
//   POST /v1/acquire  {"limit": "concurrent", "key": "tenant:7"}
//   POST /v1/settle   {"reservation": "<token of a reserving /v1/check>", "cost": 640}
//   POST /v1/release  {"limit": "concurrent", "key": "tenant:7", "lease": "<lease id>"}
//   POST /v1/renew    {"limit": "concurrent", "key": "tenant:7", "lease": "<lease id>"}
// See docs/http.md for the replies.
#ifndef TOLLGATE_SRC_SERVER_METERED_JSON_H_
#define TOLLGATE_SRC_SERVER_METERED_JSON_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "src/server/check_json.h"

namespace tollgate::server {

// POST /v1/acquire's body, {"limit", "key"} (both non-empty strings, the key at most
// kMaxKeyBytes, nothing else), as the one-item check of cost 1 it is. InvalidArgument naming
// the field otherwise; never throws.
absl::StatusOr<ParsedCheckBody> ParseAcquireBody(std::string_view body);

struct SettleBody {
  std::string reservation;
  int64_t cost = 0;
};

// A JSON object with exactly `reservation` (a non-empty string) and `cost` (an integer >= 0),
// both required. InvalidArgument naming the field otherwise (`cost: missing`); never throws.
absl::StatusOr<SettleBody> ParseSettleBody(std::string_view body);

struct LeaseBody {
  std::string limit;
  std::string key;
  std::string lease;
};

// A JSON object with exactly `limit`, `key` and `lease`, non-empty strings (the key at most
// kMaxKeyBytes). InvalidArgument naming the field otherwise; never throws.
absl::StatusOr<LeaseBody> ParseLeaseBody(std::string_view body);

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_METERED_JSON_H_
