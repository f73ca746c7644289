// Copyright tollgate authors. RedisStoreImpl's script calls: check.lua (or lease.lua) for
// the items of one hash slot, EVALSHA first and EVAL once after NOSCRIPT.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "src/store/redis/check_reply.h"
#include "src/store/redis/lua_scripts.h"
#include "src/store/redis/redis_store_impl.h"
#include "src/store/redis/script_args.h"
#include "src/store/redis/single_check_command.h"

namespace tollgate::redis {

// One check.lua call in flight: what its reply goes to, and what the NOSCRIPT retry needs
// to send it again. One allocation per call; the reply callback that owns it fits in
// AnyInvocable's inline storage.
struct RedisStoreImpl::ScriptCall {
  std::vector<CheckItem> items;
  std::optional<int64_t> now_micros;
  int slot = kAnySlot;
  bool follow_ask = false;
  bool retried = false;
  bool lease = false;                  // lua/lease.lua's call (IsSingleLease), else lua/check.lua's
  int64_t durable_timeout_micros = 0;  // DurableTimeoutMicros: > 0 when durable
  // Exactly one is set: the decisions (CheckAtAsync) or the raw reply (EvalCheckAsync).
  CheckCallback decisions_done;
  ReplyCallback reply_done;
};

void RedisStoreImpl::CheckAtAsync(std::vector<CheckItem> items, std::optional<int64_t> now_micros,
                                  CheckCallback done) {
  if (items.empty()) {
    std::move(done)(absl::InvalidArgumentError("a check needs at least one item"));
    return;
  }
  if (router_.topology() == Topology::kCluster && items.size() > 1) {
    std::vector<int> slots;
    slots.reserve(items.size());
    for (const CheckItem& item : items) slots.push_back(ItemSlot(options_.key_prefix, item));
    if (std::any_of(slots.begin(), slots.end(), [&](int slot) { return slot != slots[0]; })) {
      CheckSlotsAsync(std::move(items), slots, now_micros, std::move(done));
      return;
    }
  }
  auto call = std::make_unique<ScriptCall>();
  call->items = std::move(items);
  call->now_micros = now_micros;
  call->decisions_done = std::move(done);
  SendScriptCall(std::move(call));
}

void RedisStoreImpl::EvalCheckAsync(std::vector<CheckItem> items, std::optional<int64_t> now_micros,
                                    ReplyCallback done) {
  auto call = std::make_unique<ScriptCall>();
  call->items = std::move(items);
  call->now_micros = now_micros;
  call->reply_done = std::move(done);
  SendScriptCall(std::move(call));
}

void RedisStoreImpl::SendScriptCall(std::unique_ptr<ScriptCall> call) {
  if (router_.topology() == Topology::kCluster) {
    call->slot = ItemSlot(options_.key_prefix, call->items[0]);
    call->follow_ask = OnlyDeclaredKeys(call->items);
  }
  call->lease = IsSingleLease(call->items);
  call->durable_timeout_micros = DurableTimeoutMicros(call->items, durability_.durable_by_default);
  std::string command = ScriptCommand(*call, /*eval=*/false);
  SendScriptCommand(std::move(call), std::move(command));
}

std::string RedisStoreImpl::ScriptCommand(const ScriptCall& call, bool eval) const {
  if (call.lease) {
    return LeaseCommand(eval ? "EVAL" : "EVALSHA", eval ? kLuaLease : lease_sha_,
                        options_.key_prefix, call.items[0], call.now_micros);
  }
  if (!eval && call.items.size() == 1) {
    return SingleCheckCommand(single_check_head_, options_.key_prefix, call.items[0],
                              call.now_micros);
  }
  return CheckCommand(eval ? "EVAL" : "EVALSHA", eval ? kLuaCheck : script_sha_,
                      options_.key_prefix, call.items, call.now_micros);
}

void RedisStoreImpl::SendScriptCommand(std::unique_ptr<ScriptCall> call, std::string command) {
  const int slot = call->slot;
  const bool follow_ask = call->follow_ask;
  const int64_t durable_timeout_micros = call->durable_timeout_micros;
  Send(
      slot, std::move(command),
      [this, call = std::move(call)](absl::StatusOr<RedisReply> reply) mutable {
        OnScriptReply(std::move(call), std::move(reply));
      },
      follow_ask, durable_timeout_micros);
}

void RedisStoreImpl::OnScriptReply(std::unique_ptr<ScriptCall> call,
                                   absl::StatusOr<RedisReply> reply) {
  if (reply.ok() && reply->is_error() && !call->retried &&
      absl::StartsWith(reply->str, "NOSCRIPT")) {
    // This node lost the script (restart, failover, SCRIPT FLUSH), or never had it (a
    // cluster node that just joined or was promoted). EVAL runs it and caches it again
    // under the same SHA1, so later EVALSHA calls find it.
    call->retried = true;
    std::string command = ScriptCommand(*call, /*eval=*/true);
    SendScriptCommand(std::move(call), std::move(command));
    return;
  }
  if (call->reply_done) {
    std::move(call->reply_done)(std::move(reply));
    return;
  }
  if (!reply.ok()) {
    std::move(call->decisions_done)(reply.status());
    return;
  }
  std::move(call->decisions_done)(ParseCheckReply(*reply, call->items));
}

}  // namespace tollgate::redis
