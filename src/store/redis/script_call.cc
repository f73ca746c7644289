// Copyright tollgate authors. RedisStoreImpl's calls of check.lua: the requests of one hash
// slot in calls of at most kMaxRequestsPerCall, EVALSHA first and EVAL once after NOSCRIPT,
// and each request's answer out of the reply; durable requests in calls of their own, each
// answered once a replica holds what it wrote.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/match.h"
#include "src/store/redis/durability.h"
#include "src/store/redis/lua_scripts.h"
#include "src/store/redis/redis_store_impl.h"

namespace tollgate::redis {
namespace {

using Requests = absl::InlinedVector<const std::vector<CheckItem>*, 8>;

void Answer(ScriptRequest& request, absl::StatusOr<std::vector<Decision>> decisions,
            int64_t now_micros) {
  if (request.timed_done) {
    std::move(request.timed_done)(std::move(decisions), now_micros);
  } else {
    std::move(request.done)(std::move(decisions));
  }
}

}  // namespace

// One call of check.lua in flight: its requests, and what the NOSCRIPT retry needs to send
// it again. One allocation per call; the reply callback that owns it fits in AnyInvocable's
// inline storage.
struct RedisStoreImpl::ScriptCall {
  std::vector<ScriptRequest> requests;
  std::optional<int64_t> now_micros;
  int slot = kAnySlot;
  bool follow_ask = false;
  bool retried = false;
  // > 0: a call of durable requests (DurableTimeoutMicros), sent with SendDurable.
  int64_t durable_timeout_micros = 0;
  // A durable call's reply as read when it came, before its WAIT (Wrote).
  std::optional<CheckReply> read;

  Requests Items() const {
    Requests items;
    for (const ScriptRequest& request : requests) items.push_back(&request.items);
    return items;
  }

  // DurableSend::wrote: reads the reply once, keeps it, and says whether any request wrote
  // (RequestWrote). A reply that does not parse is answered at once, as an error.
  bool Wrote(const RedisReply& reply) {
    absl::StatusOr<CheckReply> answer = ParseCheckReply(reply, Items());
    if (!answer.ok()) return false;
    bool wrote = false;
    for (size_t i = 0; i < requests.size() && !wrote; ++i) {
      wrote = answer->requests[i].ok() && RequestWrote(requests[i].items, *answer->requests[i]);
    }
    read = *std::move(answer);
    return wrote;
  }
};

void RedisStoreImpl::CheckAtAsync(std::vector<CheckItem> items, std::optional<int64_t> now_micros,
                                  CheckCallback done) {
  const std::optional<int> slot = SlotToSend(items, now_micros, done);
  if (!slot.has_value()) return;
  std::vector<ScriptRequest> requests;
  requests.push_back({std::move(items), std::move(done), nullptr});
  SendRequests(*slot, std::move(requests), now_micros);
}

void RedisStoreImpl::FlushAsync(std::vector<ScriptRequest> requests,
                                std::optional<int64_t> now_micros) {
  // Per hash slot, in order of first appearance.
  std::vector<std::pair<int, std::vector<ScriptRequest>>> by_slot;
  for (ScriptRequest& request : requests) {
    const int slot = SlotOf(request.items).value_or(kAnySlot);
    auto it = std::find_if(by_slot.begin(), by_slot.end(),
                           [slot](const auto& group) { return group.first == slot; });
    if (it == by_slot.end()) {
      by_slot.emplace_back(slot, std::vector<ScriptRequest>());
      it = by_slot.end() - 1;
    }
    it->second.push_back(std::move(request));
  }
  for (auto& [slot, group] : by_slot) SendRequests(slot, std::move(group), now_micros);
}

void RedisStoreImpl::SendRequests(int slot, std::vector<ScriptRequest> requests,
                                  std::optional<int64_t> now_micros) {
  // Durable requests go in calls of their own, on the connection whose WAIT confirms them:
  // the others are not held up by it.
  std::vector<ScriptRequest> durable;
  std::vector<int64_t> durable_timeouts;
  size_t kept = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const int64_t timeout = DurableTimeoutMicros(requests[i].items, durability_.durable_by_default);
    if (timeout > 0) {
      durable.push_back(std::move(requests[i]));
      durable_timeouts.push_back(timeout);
    } else if (kept++ != i) {
      requests[kept - 1] = std::move(requests[i]);
    }
  }
  requests.resize(kept);
  SendCalls(slot, std::move(requests), {}, now_micros);
  SendCalls(slot, std::move(durable), durable_timeouts, now_micros);
}

void RedisStoreImpl::SendCalls(int slot, std::vector<ScriptRequest> requests,
                               const std::vector<int64_t>& durable_timeouts,
                               std::optional<int64_t> now_micros) {
  size_t next = 0;
  while (next < requests.size()) {
    auto call = std::make_unique<ScriptCall>();
    call->slot = slot;
    call->now_micros = now_micros;
    size_t items = 0;
    // As many as fit one call; a request too large to share one goes alone. A durable call
    // has the least time of its requests.
    while (next < requests.size() && call->requests.size() < kMaxRequestsPerCall &&
           (call->requests.empty() || items + requests[next].items.size() <= kMaxItemsPerCall)) {
      if (!durable_timeouts.empty()) {
        const int64_t timeout = durable_timeouts[next];
        call->durable_timeout_micros = call->durable_timeout_micros == 0
                                           ? timeout
                                           : std::min(call->durable_timeout_micros, timeout);
      }
      items += requests[next].items.size();
      call->requests.push_back(std::move(requests[next++]));
      if (items > kMaxItemsPerCall) break;
    }
    if (router_.topology() == Topology::kCluster) {
      call->follow_ask = true;
      for (const ScriptRequest& request : call->requests) {
        call->follow_ask = call->follow_ask && OnlyDeclaredKeys(request.items);
      }
    }
    SendScriptCall(std::move(call), /*eval=*/false);
  }
}

void RedisStoreImpl::SendScriptCall(std::unique_ptr<ScriptCall> call, bool eval) {
  const Requests items = call->Items();
  std::string command = CheckCommand(eval ? "EVAL" : "EVALSHA", eval ? kLuaCheck : script_sha_,
                                     options_.key_prefix, items, call->now_micros);
  const int slot = call->slot;
  const bool follow_ask = call->follow_ask;
  std::optional<DurableSend> durable;
  if (call->durable_timeout_micros > 0) {
    // The call lives in the reply's callback, which DurableWrites runs after `wrote`.
    durable = DurableSend{
        .timeout_micros = call->durable_timeout_micros,
        .wrote = [owner = call.get()](const RedisReply& reply) { return owner->Wrote(reply); }};
  }
  Send(
      slot, std::move(command),
      [this, call = std::move(call)](absl::StatusOr<RedisReply> reply) mutable {
        OnScriptReply(std::move(call), std::move(reply));
      },
      follow_ask, durable.has_value() ? &*durable : nullptr);
}

void RedisStoreImpl::OnScriptReply(std::unique_ptr<ScriptCall> call,
                                   absl::StatusOr<RedisReply> reply) {
  if (reply.ok() && reply->is_error() && !call->retried &&
      absl::StartsWith(reply->str, "NOSCRIPT")) {
    // This node lost the script (restart, failover, SCRIPT FLUSH), or never had it (a
    // cluster node that just joined or was promoted). EVAL runs it and caches it again
    // under the same SHA1, so later EVALSHA calls find it.
    call->retried = true;
    SendScriptCall(std::move(call), /*eval=*/true);
    return;
  }
  if (call->read.has_value()) {
    // A durable call whose requests were read as the reply came: one that wrote gets its
    // decisions once a replica holds them, else why not (UnconfirmedWriteError, or the lost
    // connection's status); the others get theirs either way.
    CheckReply& read = *call->read;
    for (size_t i = 0; i < call->requests.size(); ++i) {
      ScriptRequest& request = call->requests[i];
      if (!reply.ok() && read.requests[i].ok() && RequestWrote(request.items, *read.requests[i])) {
        Answer(request, reply.status(), 0);
      } else {
        Answer(request, std::move(read.requests[i]), read.now_micros);
      }
    }
    return;
  }
  absl::StatusOr<CheckReply> answer =
      reply.ok() ? ParseCheckReply(*reply, call->Items()) : reply.status();
  if (!answer.ok()) {
    for (ScriptRequest& request : call->requests) Answer(request, answer.status(), 0);
    return;
  }
  for (size_t i = 0; i < call->requests.size(); ++i) {
    Answer(call->requests[i], std::move(answer->requests[i]), answer->now_micros);
  }
}

}  // namespace tollgate::redis
