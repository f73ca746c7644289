// Copyright tollgate authors.
#include "src/store/redis/eviction_check.h"

#include <optional>

#include "absl/strings/str_cat.h"

namespace tollgate::redis {

void CheckEviction(Router& client, std::vector<std::string>* warnings) {
  absl::StatusOr<RedisReply> policy = client.Command({"CONFIG", "GET", "maxmemory-policy"});
  absl::StatusOr<RedisReply> maxmemory = client.Command({"CONFIG", "GET", "maxmemory"});
  auto value = [](const absl::StatusOr<RedisReply>& reply) -> std::optional<std::string> {
    if (!reply.ok() || reply->type != RedisReply::Type::kArray || reply->elements.size() != 2) {
      return std::nullopt;
    }
    return reply->elements[1].str;
  };
  std::optional<std::string> policy_value = value(policy);
  std::optional<std::string> maxmemory_value = value(maxmemory);
  if (!policy_value.has_value() || !maxmemory_value.has_value()) {
    warnings->push_back(
        absl::StrCat("could not read Redis' maxmemory-policy (",
                     policy.ok() ? DebugString(*policy) : policy.status().ToString(),
                     "); make sure it is noeviction, or an eviction will silently reset limits"));
    return;
  }
  if (*policy_value == "noeviction") return;
  if (*maxmemory_value == "0") {
    warnings->push_back(absl::StrCat(
        "Redis' maxmemory-policy is ", *policy_value,
        "; it evicts nothing while maxmemory is 0, but once maxmemory is set it can evict limit "
        "keys and silently reset counters: use noeviction (a Redis of its own for limits)"));
    return;
  }
  warnings->push_back(absl::StrCat(
      "Redis' maxmemory-policy is ", *policy_value, " with maxmemory ", *maxmemory_value,
      ": under memory pressure Redis evicts limit keys, silently resetting counters; use "
      "noeviction (a Redis of its own for limits)"));
}

}  // namespace tollgate::redis
