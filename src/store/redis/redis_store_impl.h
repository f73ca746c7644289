// Copyright tollgate authors. RedisStore's implementation, visible to its tests.
#ifndef TOLLGATE_SRC_STORE_REDIS_REDIS_STORE_IMPL_H_
#define TOLLGATE_SRC_STORE_REDIS_REDIS_STORE_IMPL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "src/core/in_flight.h"
#include "src/store/redis/check_reply.h"
#include "src/store/redis/durability.h"
#include "src/store/redis/router.h"
#include "src/store/redis/script_args.h"
#include "src/store/redis/single_check_command.h"
#include "tollgate/redis_store.h"

namespace tollgate::redis {

class RedisStoreImpl final : public RedisStore {
 public:
  RedisStoreImpl(RedisStoreOptions options, std::shared_ptr<RedisConnections> connections,
                 std::string script_sha, std::string lease_sha, std::vector<std::string> warnings,
                 DurabilityAssessment durability);
  // Connections of its own are closed, failing the calls still out at once; shared ones stay
  // with the other stores, and the destructor waits for this store's calls to be answered
  // (at most their reply timeout). REQUIRES: not on one of the connections' I/O threads.
  ~RedisStoreImpl() override;

  // One script call: check.lua applies every ItemOp but kAdd (see its header); a batch of
  // kAdd items is one EVAL of lua/add.lua per hash slot (see its header for the rule).
  void ApplyAsync(std::vector<CheckItem> items, CheckCallback done) override;
  const std::vector<std::string>& warnings() const override { return warnings_; }
  // Durable limits (redis_store_durable.cc).
  bool Durable(const Limit& limit) const override;
  absl::Status CheckDurable(const std::vector<Limit>& limits) const override;
  DurableWaitStats durable_waits() const override;

  // Items whose keys share a hash slot (always, on one server) are checked in one script
  // call. In a Redis Cluster, items on several slots are checked with one call per slot,
  // concurrently; if any call refuses or fails, refund.lua gives back what the admitting
  // calls consumed before `done` runs, so the request consumes nothing (see
  // docs/redis.md).
  // ApplyAsync with the script's time pinned to `now_micros` instead of Redis TIME. Only
  // for the shared decision-table test; production calls never pin time.
  void CheckAtAsync(std::vector<CheckItem> items, std::optional<int64_t> now_micros,
                    CheckCallback done);

  // The script's raw reply (one string: now_micros, then four values per item; see
  // ParseCheckReply).
  // REQUIRES: every item's key in one hash slot (or a store on one server).
  void EvalCheckAsync(std::vector<CheckItem> items, std::optional<int64_t> now_micros,
                      ReplyCallback done);

  // Where commands go (one server, cluster slots, or Sentinel's primary).
  Router& client() { return router_; }
  const std::string& key_prefix() const { return options_.key_prefix; }

 private:
  struct MultiSlotCheck;  // multi_slot_check.cc
  struct ScriptCall;      // script_call.cc
  // Sends `call` (EVALSHA; EVAL once after NOSCRIPT) and answers it in OnScriptReply.
  void SendScriptCall(std::unique_ptr<ScriptCall> call);
  // `call`'s EVALSHA of its script (lease.lua or check.lua), or with `eval` its EVAL.
  std::string ScriptCommand(const ScriptCall& call, bool eval) const;
  // Sends `command` (EVALSHA, or EVAL after NOSCRIPT) for `call` to its slot; the reply goes
  // to OnScriptReply.
  void SendScriptCommand(std::unique_ptr<ScriptCall> call, std::string command);
  void OnScriptReply(std::unique_ptr<ScriptCall> call, absl::StatusOr<RedisReply> reply);
  void CheckSlotsAsync(std::vector<CheckItem> items, const std::vector<int>& slots,
                       std::optional<int64_t> now_micros, CheckCallback done);
  static void FinishMultiSlot(const std::shared_ptr<MultiSlotCheck>& check);
  // ApplyAsync of a batch of kAdd items.
  void AddAsync(std::vector<CheckItem> items, CheckCallback done);
  // router_.Send, counted in calls_in_flight_ until `done` has returned; with
  // `durable_timeout_micros` > 0 (DurableTimeoutMicros), router_.SendDurable.
  void Send(int slot, std::string command, ReplyCallback done, bool follow_ask,
            int64_t durable_timeout_micros = 0);

  const RedisStoreOptions options_;
  const std::string script_sha_;         // lua/check.lua's
  const std::string lease_sha_;          // lua/lease.lua's
  const std::string single_check_head_;  // SingleCheckHead(script_sha_)
  const std::vector<std::string> warnings_;
  const DurabilityAssessment durability_;
  Clock* const clock_;  // options_.clock or SystemClock()
  // Calls sent whose callbacks (which read the members here) have not returned yet. Shared
  // with the callbacks, which count down after they return; the destructor waits on it.
  const std::shared_ptr<internal::InFlight> calls_in_flight_ =
      std::make_shared<internal::InFlight>();
  std::shared_ptr<RedisConnections> connections_;
  Router& router_;
};

}  // namespace tollgate::redis

#endif  // TOLLGATE_SRC_STORE_REDIS_REDIS_STORE_IMPL_H_
