// Copyright tollgate authors.
#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/store/redis/lua_scripts.h"
#include "src/store/redis/redis_store_impl.h"
#include "src/store/redis/redis_url.h"
#include "tollgate/clock.h"

namespace tollgate {
namespace redis {
namespace {

// Values per item in the script's reply, after the leading now_micros.
constexpr size_t kReplyFieldsPerItem = 5;

// Reads maxmemory settings. An eviction policy other than noeviction can evict our keys
// once Redis reaches maxmemory: allkeys-* pick any key, and volatile-* pick keys with a TTL,
// which every tollgate key has. Either silently resets counters.
void CheckEviction(RedisClient& client, std::vector<std::string>* warnings) {
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

// One item's ARGV of check.lua and add.lua: algorithm, a, b, cost.
void AppendItemArgs(const CheckItem& item, std::vector<std::string>& args) {
  const LimitNumbers& numbers = item.limit->numbers;
  switch (numbers.algorithm) {
    case Algorithm::kTokenBucket:
      args.emplace_back("t");
      args.push_back(absl::StrCat(numbers.capacity));
      // %.17g round-trips the double exactly, so the script computes with the same rate.
      args.push_back(absl::StrFormat("%.17g", numbers.refill_per_second));
      break;
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingWindow:
      args.emplace_back(numbers.algorithm == Algorithm::kFixedWindow ? "f" : "s");
      args.push_back(absl::StrCat(numbers.limit));
      args.push_back(absl::StrCat(numbers.window_micros));
      break;
  }
  args.push_back(absl::StrCat(item.cost));
}

std::vector<std::string> CheckArgs(std::string_view verb, std::string_view script,
                                   std::string_view prefix, const std::vector<CheckItem>& items,
                                   std::optional<int64_t> now_micros) {
  std::vector<std::string> args;
  args.reserve(3 + items.size() * 5 + 1);
  args.emplace_back(verb);
  args.emplace_back(script);
  args.push_back(absl::StrCat(items.size()));
  for (const CheckItem& item : items) args.push_back(StateKey(prefix, item.limit->name, item.key));
  args.push_back(now_micros.has_value() ? absl::StrCat(*now_micros) : std::string());
  for (const CheckItem& item : items) AppendItemArgs(item, args);
  return args;
}

// EVAL of lua/add.lua: per item algorithm, a, b, cost, age (µs before Redis' now).
std::vector<std::string> AddArgs(std::string_view script, std::string_view prefix,
                                 const std::vector<CheckItem>& items) {
  const int64_t now_micros = SystemClock().NowMicros();
  std::vector<std::string> args;
  args.reserve(4 + items.size() * 6);
  args.emplace_back("EVAL");
  args.emplace_back(script);
  args.push_back(absl::StrCat(items.size()));
  for (const CheckItem& item : items) args.push_back(StateKey(prefix, item.limit->name, item.key));
  args.emplace_back();
  for (const CheckItem& item : items) {
    AppendItemArgs(item, args);
    // An age, not a time: this host's clock and Redis' need not agree.
    const int64_t age_micros = item.at_micros == 0 ? 0 : now_micros - item.at_micros;
    args.push_back(absl::StrCat(std::max<int64_t>(0, age_micros)));
  }
  return args;
}

}  // namespace

std::string StateKey(std::string_view prefix, std::string_view limit_name, std::string_view key) {
  std::string out;
  out.reserve(prefix.size() + limit_name.size() + key.size() + 3);
  out.append(prefix).append(limit_name).append(":{").append(key).append("}");
  return out;
}

absl::StatusOr<std::vector<Decision>> ParseCheckReply(const RedisReply& reply,
                                                      const std::vector<CheckItem>& items,
                                                      int64_t* now_micros) {
  if (reply.is_error()) {
    return absl::InternalError(absl::StrCat("Redis refused the check script: ", reply.str));
  }
  if (reply.type != RedisReply::Type::kArray ||
      reply.elements.size() != 1 + kReplyFieldsPerItem * items.size()) {
    return absl::InternalError(
        absl::StrCat("unexpected reply to the check script: ", DebugString(reply)));
  }
  for (const RedisReply& element : reply.elements) {
    if (element.type != RedisReply::Type::kInteger) {
      return absl::InternalError(
          absl::StrCat("unexpected reply to the check script: ", DebugString(reply)));
    }
  }
  if (now_micros != nullptr) *now_micros = reply.elements[0].integer;
  std::vector<Decision> decisions;
  decisions.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const RedisReply* fields = &reply.elements[1 + kReplyFieldsPerItem * i];
    Decision decision;
    decision.allowed = fields[0].integer != 0;
    decision.limit = items[i].limit->numbers.MaxCost();
    decision.remaining = fields[1].integer;
    decision.reset_after_micros = fields[2].integer;
    decision.retry_after_micros = fields[3].integer;
    decision.source = DecisionSource::kRedis;
    switch (fields[4].integer) {
      case 0:
        decision.reason = DenyReason::kNone;
        break;
      case 1:
        decision.reason = DenyReason::kOverLimit;
        break;
      default:
        decision.reason = DenyReason::kCostExceedsLimit;
        break;
    }
    decisions.push_back(decision);
  }
  return decisions;
}

RedisStoreImpl::RedisStoreImpl(RedisStoreOptions options, std::unique_ptr<RedisClient> client,
                               std::string script_sha, std::vector<std::string> warnings)
    : options_(std::move(options)),
      script_sha_(std::move(script_sha)),
      warnings_(std::move(warnings)),
      client_(std::move(client)) {}

void RedisStoreImpl::CheckAsync(std::vector<CheckItem> items, CheckCallback done) {
  CheckAtAsync(std::move(items), std::nullopt, std::move(done));
}

void RedisStoreImpl::CheckAtAsync(std::vector<CheckItem> items, std::optional<int64_t> now_micros,
                                  CheckCallback done) {
  if (items.empty()) {
    std::move(done)(absl::InvalidArgumentError("a check needs at least one item"));
    return;
  }
  auto shared_items = std::make_shared<std::vector<CheckItem>>(items);
  EvalCheckAsync(std::move(items), now_micros,
                 [shared_items, done = std::move(done)](absl::StatusOr<RedisReply> reply) mutable {
                   if (!reply.ok()) {
                     std::move(done)(reply.status());
                     return;
                   }
                   std::move(done)(ParseCheckReply(*reply, *shared_items));
                 });
}

void RedisStoreImpl::EvalCheckAsync(const std::vector<CheckItem>& items,
                                    std::optional<int64_t> now_micros, ReplyCallback done) {
  std::vector<std::string> args =
      CheckArgs("EVALSHA", script_sha_, options_.key_prefix, items, now_micros);
  std::string command = FormatCommand(args);
  client_->Send(std::move(command), [this, args = std::move(args), done = std::move(done)](
                                        absl::StatusOr<RedisReply> reply) mutable {
    if (reply.ok() && reply->is_error() && absl::StartsWith(reply->str, "NOSCRIPT")) {
      // Redis lost the script (restart, failover, SCRIPT FLUSH). EVAL runs it and caches it
      // again under the same SHA1, so later EVALSHA calls find it.
      args[0] = "EVAL";
      args[1] = std::string(kLuaCheck);
      client_->Send(args, std::move(done));
      return;
    }
    std::move(done)(std::move(reply));
  });
}

void RedisStoreImpl::AddAsync(std::vector<CheckItem> items, AddCallback done) {
  if (items.empty()) {
    std::move(done)(absl::OkStatus());
    return;
  }
  // EVAL, not EVALSHA: reconciliation runs right after Redis returns, often a restarted
  // Redis without the script, and a NOSCRIPT retry would let checks sent meanwhile on the
  // same connection overtake the added consumption. It is rare, so the script's bytes on
  // the wire do not matter; one round trip keeps it ahead of later checks.
  std::vector<std::string> args = AddArgs(kLuaAdd, options_.key_prefix, items);
  client_->Send(args, [done = std::move(done)](absl::StatusOr<RedisReply> reply) mutable {
    if (!reply.ok()) {
      std::move(done)(reply.status());
    } else if (reply->is_error()) {
      std::move(done)(
          absl::InternalError(absl::StrCat("Redis refused the add script: ", reply->str)));
    } else {
      std::move(done)(absl::OkStatus());
    }
  });
}

}  // namespace redis

absl::StatusOr<std::unique_ptr<RedisStore>> RedisStore::Create(RedisStoreOptions options) {
  absl::StatusOr<redis::RedisUrl> url = redis::ParseRedisUrl(options.url);
  if (!url.ok()) return url.status();
  if (options.connections < 1 || options.connections > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("RedisStoreOptions.connections must be in 1..64, got ", options.connections));
  }
  if (options.connect_timeout_ms < 1 || options.reply_timeout_ms < 1 ||
      options.reconnect_min_ms < 1 || options.reconnect_max_ms < options.reconnect_min_ms) {
    return absl::InvalidArgumentError(
        "RedisStoreOptions: timeouts must be >= 1 ms and reconnect_max_ms >= reconnect_min_ms");
  }
  redis::ClientOptions client_options;
  client_options.connections = options.connections;
  client_options.connection.url = *std::move(url);
  client_options.connection.connect_timeout = std::chrono::milliseconds(options.connect_timeout_ms);
  client_options.connection.reply_timeout = std::chrono::milliseconds(options.reply_timeout_ms);
  client_options.connection.reconnect_min = std::chrono::milliseconds(options.reconnect_min_ms);
  client_options.connection.reconnect_max = std::chrono::milliseconds(options.reconnect_max_ms);
  absl::StatusOr<std::unique_ptr<redis::RedisClient>> client =
      redis::RedisClient::Connect(client_options);
  if (!client.ok()) return client.status();

  absl::StatusOr<redis::RedisReply> loaded =
      (*client)->Command({"SCRIPT", "LOAD", std::string(redis::kLuaCheck)});
  if (!loaded.ok()) return loaded.status();
  if (loaded->type != redis::RedisReply::Type::kString) {
    return absl::InternalError(
        absl::StrCat("SCRIPT LOAD of the check script failed: ", redis::DebugString(*loaded)));
  }
  std::vector<std::string> warnings;
  redis::CheckEviction(**client, &warnings);
  return std::make_unique<redis::RedisStoreImpl>(std::move(options), *std::move(client),
                                                 loaded->str, std::move(warnings));
}

}  // namespace tollgate
