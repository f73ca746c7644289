// Copyright tollgate authors. The EVALSHA of check.lua for one item, written in one pass.
#ifndef TOLLGATE_SRC_STORE_REDIS_SINGLE_CHECK_COMMAND_H_
#define TOLLGATE_SRC_STORE_REDIS_SINGLE_CHECK_COMMAND_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tollgate/store.h"

namespace tollgate::redis {

// The same bytes as CheckCommand("EVALSHA", sha, prefix, {item}, now_micros), written into
// one string sized up front from `head` = SingleCheckHead(sha): the call of every one-item
// decision.
std::string SingleCheckHead(std::string_view sha);
std::string SingleCheckCommand(std::string_view head, std::string_view prefix,
                               const CheckItem& item, std::optional<int64_t> now_micros);

}  // namespace tollgate::redis

#endif  // TOLLGATE_SRC_STORE_REDIS_SINGLE_CHECK_COMMAND_H_
