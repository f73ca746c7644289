// Copyright tollgate authors. The RESP of one call of lua/check.lua: one request alone, or a
// flush's requests in one batch.
#ifndef TOLLGATE_SRC_STORE_REDIS_CHECK_COMMAND_H_
#define TOLLGATE_SRC_STORE_REDIS_CHECK_COMMAND_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "tollgate/store.h"

namespace tollgate::redis {

// How check.lua runs a request: the kind byte of its entry in a batch's layout.
enum class RequestKind : char {
  kPlain = 'p',    // checks of rate limits: no op, no id, none in shadow mode
  kLease = 'k',    // one concurrency item taking (a check with an id) or releasing its lease,
                   // not in shadow mode; its key is the lease set's
  kGeneral = 'g',  // any other
};
RequestKind KindOf(const std::vector<CheckItem>& items);

// Why `items` cannot be one request (InvalidArgument naming the limit and what is wrong), or
// OK: items, each with a limit whose numbers are valid (ValidateLimit), a key, a cost >= 0, an
// op its algorithm takes (no kAdd: those go to lua/add.lua) and an id where the op needs one.
absl::Status ValidateRequest(const std::vector<CheckItem>& items);

// What one call of check.lua carries in the batch form, where spec numbers and item counts
// are bytes: at most kMaxItemsPerCall items (so at most as many distinct specs), in at most
// kMaxRequestsPerCall requests (each the script decides in turn while Redis runs nothing
// else). A request of more items goes alone, in the one-request form, which has no limit.
inline constexpr size_t kMaxItemsPerCall = 255;
inline constexpr size_t kMaxRequestsPerCall = 64;

// Whether `requests` fit one call (REQUIRES of CheckCommand).
bool FitsOneCall(absl::Span<const std::vector<CheckItem>* const> requests);

// `<verb> <script> <n> <keys> <time> ...`: check.lua's call for `requests`, in order (verb
// EVALSHA with its SHA1, or EVAL with its text), `now_micros` unset for Redis TIME. One
// request goes in the one-request form (its items' specs), several in the batch form (a
// layout, led by 'D' when every request is plain checks and no state key comes twice, then
// each distinct spec once); lua/check.lua's header has both.
// REQUIRES: FitsOneCall(requests); every request non-empty.
std::string CheckCommand(std::string_view verb, std::string_view script, std::string_view prefix,
                         absl::Span<const std::vector<CheckItem>* const> requests,
                         std::optional<int64_t> now_micros);

}  // namespace tollgate::redis

#endif  // TOLLGATE_SRC_STORE_REDIS_CHECK_COMMAND_H_
