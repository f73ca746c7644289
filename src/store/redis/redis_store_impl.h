// Copyright tollgate authors. RedisStore's implementation, visible to its tests.
#ifndef TOLLGATE_SRC_STORE_REDIS_REDIS_STORE_IMPL_H_
#define TOLLGATE_SRC_STORE_REDIS_REDIS_STORE_IMPL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "src/core/in_flight.h"
#include "src/store/redis/check_command.h"
#include "src/store/redis/check_reply.h"
#include "src/store/redis/durability.h"
#include "src/store/redis/durable_writes.h"
#include "src/store/redis/router.h"
#include "src/store/redis/script_args.h"
#include "tollgate/redis_store.h"

namespace tollgate::redis {

// One request for check.lua (one ApplyAsync, or one hash slot's share of it) and where its
// answer goes: exactly one callback is set, `done` for the decisions or `timed_done` for the
// decisions and the time the script decided at (which a give-back needs, see
// CheckSlotsAsync).
struct ScriptRequest {
  using TimedCallback =
      absl::AnyInvocable<void(absl::StatusOr<std::vector<Decision>>, int64_t now_micros) &&>;
  std::vector<CheckItem> items;
  CheckCallback done;
  TimedCallback timed_done;
};

class RedisStoreImpl final : public RedisStore {
 public:
  RedisStoreImpl(RedisStoreOptions options, std::shared_ptr<RedisConnections> connections,
                 std::string script_sha, std::vector<std::string> warnings,
                 DurabilityAssessment durability);
  // Connections of its own are closed, failing the calls still out at once; shared ones stay
  // with the other stores, and the destructor waits for this store's calls to be answered
  // (at most their reply timeout). REQUIRES: not on one of the connections' I/O threads.
  ~RedisStoreImpl() override;

  // check.lua applies every ItemOp but kAdd (see its header); a batch of kAdd items is one
  // EVAL of lua/add.lua per hash slot (see its header for the rule).
  //
  // The requests one thread makes while one I/O handler of the connections' runs (a read of
  // Redis replies whose callbacks check again; a read of a gRPC connection's calls) wait for
  // that handler's end and go as one script call per hash slot (kMaxRequestsPerCall at most),
  // which decides each in turn; elsewhere a request goes at once, alone. Each request is
  // answered on its own, and fails alone when Redis finds bad state under its keys.
  //
  // Items whose keys share a hash slot (always, on one server) are checked in one request.
  // In a Redis Cluster, items on several slots are checked with one request per slot,
  // concurrently; if any refuses or fails, refund.lua gives back what the admitting ones
  // consumed before `done` runs, so the request consumes nothing (see docs/redis.md).
  void ApplyAsync(std::vector<CheckItem> items, CheckCallback done) override;
  const std::vector<std::string>& warnings() const override { return warnings_; }
  // Durable limits (redis_store_durable.cc).
  bool Durable(const Limit& limit) const override;
  absl::Status CheckDurable(const std::vector<Limit>& limits) const override;
  DurableWaitStats durable_waits() const override;

  // ApplyAsync with the script's time pinned to `now_micros` instead of Redis TIME, the
  // request sent alone at once. Only for the shared decision-table test; production calls
  // never pin time.
  void CheckAtAsync(std::vector<CheckItem> items, std::optional<int64_t> now_micros,
                    CheckCallback done);

  // Sends `requests` now as one flush: one script call per hash slot, each of at most
  // kMaxRequestsPerCall requests, the script's time pinned to `now_micros` when set. What the
  // end of an I/O handler does with the requests made during it; tests call it to make a
  // batch of known requests. REQUIRES: each request valid (ValidateRequest), its keys in one
  // hash slot.
  void FlushAsync(std::vector<ScriptRequest> requests, std::optional<int64_t> now_micros);

  // Where commands go (one server, cluster slots, or Sentinel's primary).
  Router& client() { return router_; }
  const std::string& key_prefix() const { return options_.key_prefix; }

 private:
  struct OpenFlush;
  struct ScriptCall;
  struct MultiSlotCheck;

  // Answers the requests of this thread's open flush for this store Unavailable (the store is
  // being destroyed by a callback of its own, on the thread that would send them).
  void AbandonOpenFlush();
  // The hash slot of `items` (kAnySlot on one server); nullopt when they span several.
  std::optional<int> SlotOf(const std::vector<CheckItem>& items) const;
  // The one hash slot of a request of `items` for the caller to send; nullopt when it is
  // taken care of here: `done` answered (invalid items) or the request sent through
  // CheckSlotsAsync (items of several slots). `items` and `done` are moved from then only.
  std::optional<int> SlotToSend(std::vector<CheckItem>& items, std::optional<int64_t> now_micros,
                                CheckCallback& done);
  // `request` joins this thread's open flush for this store, or opens one that goes at the
  // end of the running I/O handler; on a thread that runs no handler of the connections, it
  // goes at once.
  void Submit(int slot, ScriptRequest request);
  // The script calls of `requests`, all of hash slot `slot`: durable requests (durability.h)
  // in calls of their own.
  void SendRequests(int slot, std::vector<ScriptRequest> requests,
                    std::optional<int64_t> now_micros);
  // Calls of at most kMaxRequestsPerCall of `requests`, in order; with `durable_timeouts`
  // (each request's DurableTimeoutMicros), durable calls.
  void SendCalls(int slot, std::vector<ScriptRequest> requests,
                 const std::vector<int64_t>& durable_timeouts, std::optional<int64_t> now_micros);
  // Sends `call` (EVALSHA; EVAL once after NOSCRIPT) and answers it in OnScriptReply.
  void SendScriptCall(std::unique_ptr<ScriptCall> call, bool eval);
  void OnScriptReply(std::unique_ptr<ScriptCall> call, absl::StatusOr<RedisReply> reply);
  void CheckSlotsAsync(std::vector<CheckItem> items, const std::vector<int>& slots,
                       std::optional<int64_t> now_micros, CheckCallback done);
  static void FinishMultiSlot(const std::shared_ptr<MultiSlotCheck>& check);
  // ApplyAsync of a batch of kAdd items.
  void AddAsync(std::vector<CheckItem> items, CheckCallback done);
  // router_.Send, counted in calls_in_flight_ until `done` has returned; with `durable`,
  // router_.SendDurable (answered once a replica holds what the command wrote).
  void Send(int slot, std::string command, ReplyCallback done, bool follow_ask,
            const DurableSend* durable = nullptr);

  // The flushes open on this thread, one per store at most.
  static thread_local std::vector<OpenFlush*> open_flushes_;

  const RedisStoreOptions options_;
  const std::string script_sha_;  // lua/check.lua's
  const std::vector<std::string> warnings_;
  const DurabilityAssessment durability_;
  Clock* const clock_;  // options_.clock or SystemClock()
  // Calls sent whose callbacks (which read the members here) have not returned yet, and open
  // flushes not yet sent. Shared with the callbacks, which count down after they return; the
  // destructor waits on it.
  const std::shared_ptr<internal::InFlight> calls_in_flight_ =
      std::make_shared<internal::InFlight>();
  std::shared_ptr<RedisConnections> connections_;
  Router& router_;
};

}  // namespace tollgate::redis

#endif  // TOLLGATE_SRC_STORE_REDIS_REDIS_STORE_IMPL_H_
