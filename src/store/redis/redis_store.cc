// Copyright tollgate authors. RedisStore: its construction, where its requests go, and the
// reconciliation's adds. Flushes are in open_flush.cc, check.lua's calls in script_call.cc,
// checks across cluster slots in multi_slot_check.cc, the scripts' arguments in
// check_command.cc and script_args.cc.
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "src/store/redis/eviction_check.h"
#include "src/store/redis/lua_scripts.h"
#include "src/store/redis/redis_connections_impl.h"
#include "src/store/redis/redis_store_impl.h"
#include "src/store/redis/script_args.h"
#include "src/store/redis/slot.h"
#include "tollgate/clock.h"

namespace tollgate {
namespace redis {
namespace {

// The in-flight count of the store one of whose calls' callbacks runs on this thread.
thread_local const internal::InFlight* t_answering = nullptr;

}  // namespace

RedisStoreImpl::RedisStoreImpl(RedisStoreOptions options,
                               std::shared_ptr<RedisConnections> connections,
                               std::string script_sha, std::vector<std::string> warnings,
                               DurabilityAssessment durability)
    : options_(std::move(options)),
      script_sha_(std::move(script_sha)),
      warnings_(std::move(warnings)),
      durability_(std::move(durability)),
      clock_(options_.clock != nullptr ? options_.clock : &SystemClock()),
      connections_(std::move(connections)),
      router_(RouterOf(*connections_)) {}

RedisStoreImpl::~RedisStoreImpl() {
  AbandonOpenFlush();
  // Nobody else holds them: closing them answers every call still out, now.
  if (connections_.use_count() == 1) connections_.reset();
  // A store released by one of its own calls' callbacks (the last owner let go in it) does
  // not wait for that call: it is over but for the count.
  calls_in_flight_->WaitUntilAtMost(t_answering == calls_in_flight_.get() ? 1 : 0);
}

void RedisStoreImpl::Send(int slot, std::string command, ReplyCallback done, bool follow_ask,
                          const DurableSend* durable) {
  calls_in_flight_->Start();
  ReplyCallback counted = [in_flight = calls_in_flight_,
                           done = std::move(done)](absl::StatusOr<RedisReply> reply) mutable {
    const internal::InFlight* outer = std::exchange(t_answering, in_flight.get());
    std::move(done)(std::move(reply));
    t_answering = outer;
    // The store may be gone from here on (released in `done`, or by its destructor as
    // soon as this count falls).
    in_flight->Finish();
  };
  // ---- durable limits (durable_writes.h): answered once a replica holds the write ----
  if (durable != nullptr) {
    router_.SendDurable(slot, std::move(command), *durable, std::move(counted));
    return;
  }
  router_.Send(slot, std::move(command), std::move(counted), follow_ask);
}

std::optional<int> RedisStoreImpl::SlotOf(const std::vector<CheckItem>& items) const {
  if (router_.topology() != Topology::kCluster) return kAnySlot;
  const int slot = ItemSlot(options_.key_prefix, items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    if (ItemSlot(options_.key_prefix, items[i]) != slot) return std::nullopt;
  }
  return slot;
}

void RedisStoreImpl::ApplyAsync(std::vector<CheckItem> items, CheckCallback done) {
  if (!items.empty() && items.front().op == ItemOp::kAdd) {
    AddAsync(std::move(items), std::move(done));
    return;
  }
  // check.lua applies every other op.
  const std::optional<int> slot = SlotToSend(items, std::nullopt, done);
  if (!slot.has_value()) return;
  Submit(*slot, {std::move(items), std::move(done), nullptr});
}

std::optional<int> RedisStoreImpl::SlotToSend(std::vector<CheckItem>& items,
                                              std::optional<int64_t> now_micros,
                                              CheckCallback& done) {
  if (absl::Status valid = ValidateRequest(items); !valid.ok()) {
    std::move(done)(std::move(valid));
    return std::nullopt;
  }
  const std::optional<int> slot = SlotOf(items);
  if (!slot.has_value()) {
    std::vector<int> slots;
    slots.reserve(items.size());
    for (const CheckItem& item : items) slots.push_back(ItemSlot(options_.key_prefix, item));
    CheckSlotsAsync(std::move(items), slots, now_micros, std::move(done));
  }
  return slot;
}

void RedisStoreImpl::AddAsync(std::vector<CheckItem> items, CheckCallback done) {
  for (const CheckItem& item : items) {
    if (item.op != ItemOp::kAdd) {
      std::move(done)(absl::InvalidArgumentError(
          absl::StrCat("kAdd items go in a batch of their own (limit '", item.limit->name, "')")));
      return;
    }
  }
  // EVAL, not EVALSHA: reconciliation runs right after Redis returns, often a restarted
  // Redis without the script, and a NOSCRIPT retry would let checks sent meanwhile on the
  // same connection overtake the added consumption. It is rare, so the script's bytes on
  // the wire do not matter; one round trip keeps it ahead of later checks.
  // One EVAL per hash slot (always one on a single server); `done` gets the first error.
  std::vector<int> slots;
  slots.reserve(items.size());
  for (const CheckItem& item : items) {
    slots.push_back(router_.topology() == Topology::kCluster ? ItemSlot(options_.key_prefix, item)
                                                             : 0);
  }
  struct Join {
    absl::Mutex mu;
    absl::Status status ABSL_GUARDED_BY(mu);
    size_t pending ABSL_GUARDED_BY(mu) = 0;
    std::vector<Decision> decisions;  // one per item, each "applied"
    CheckCallback done;
  };
  auto join = std::make_shared<Join>();
  join->done = std::move(done);
  join->decisions.reserve(items.size());
  for (const CheckItem& item : items) {
    Decision applied;
    applied.allowed = true;
    applied.limit = item.limit->numbers.MaxCost();
    applied.source = DecisionSource::kRedis;
    join->decisions.push_back(applied);
  }
  std::vector<std::vector<size_t>> groups = GroupBySlot(slots);
  {
    absl::MutexLock lock(&join->mu);
    join->pending = groups.size();
  }
  for (const std::vector<size_t>& group : groups) {
    std::vector<CheckItem> group_items;
    for (size_t index : group) group_items.push_back(items[index]);
    Send(
        ItemSlot(options_.key_prefix, group_items[0]),
        AddCommand(options_.key_prefix, group_items, clock_->NowMicros()),
        [join](absl::StatusOr<RedisReply> reply) {
          absl::Status status;
          if (!reply.ok()) {
            status = reply.status();
          } else if (reply->is_error()) {
            status =
                absl::InternalError(absl::StrCat("Redis refused the add script: ", reply->str));
          }
          bool last = false;
          {
            absl::MutexLock lock(&join->mu);
            if (join->status.ok()) join->status = status;
            last = --join->pending == 0;
          }
          if (!last) return;
          absl::Status result;
          {
            absl::MutexLock lock(&join->mu);
            result = join->status;
          }
          if (result.ok()) {
            std::move(join->done)(std::move(join->decisions));
          } else {
            std::move(join->done)(std::move(result));
          }
        },
        OnlyDeclaredKeys(group_items));
  }
}

}  // namespace redis

absl::StatusOr<std::unique_ptr<RedisStore>> RedisStore::Create(RedisStoreOptions options) {
  std::shared_ptr<RedisConnections> connections = std::move(options.redis);
  if (connections == nullptr) {
    return absl::InvalidArgumentError("RedisStore needs connections (RedisStoreOptions::redis)");
  }
  options.redis = nullptr;  // the store holds them once, as `connections_`
  redis::Router& router = redis::RouterOf(*connections);

  // In a cluster this loads the script on one primary; the others get it from the EVAL that
  // follows their first NOSCRIPT.
  absl::StatusOr<redis::RedisReply> loaded =
      router.Command({"SCRIPT", "LOAD", std::string(redis::kLuaCheck)});
  if (!loaded.ok()) return loaded.status();
  if (loaded->type != redis::RedisReply::Type::kString) {
    return absl::InternalError(
        absl::StrCat("SCRIPT LOAD of the check script failed: ", redis::DebugString(*loaded)));
  }
  std::vector<std::string> warnings;
  redis::CheckEviction(router, &warnings);
  redis::DurabilityAssessment durability = redis::AssessDurability(router);
  warnings.insert(warnings.end(), durability.warnings.begin(), durability.warnings.end());
  redis::DurableMonitorOf(*connections).set_on_event(options.on_event);
  return std::make_unique<redis::RedisStoreImpl>(std::move(options), std::move(connections),
                                                 std::move(loaded->str), std::move(warnings),
                                                 std::move(durability));
}

}  // namespace tollgate
