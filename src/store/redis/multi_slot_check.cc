// Copyright tollgate authors. RedisStoreImpl's checks across hash slots of a Redis Cluster:
// one script call per slot, and refund.lua for what the admitting calls consumed when the
// request as a whole is refused (core/batch.h's rules decide both).
#include <atomic>
#include <memory>
#include <optional>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "src/core/batch.h"
#include "src/store/redis/check_reply.h"
#include "src/store/redis/redis_store_impl.h"
#include "src/store/redis/script_args.h"

namespace tollgate::redis {

struct RedisStoreImpl::MultiSlotCheck {
  RedisStoreImpl* store = nullptr;
  std::vector<CheckItem> items;
  std::vector<std::vector<size_t>> groups;  // item indexes per slot
  CheckCallback done;

  absl::Mutex mu;
  std::vector<absl::StatusOr<RedisReply>> replies ABSL_GUARDED_BY(mu);
  size_t pending ABSL_GUARDED_BY(mu) = 0;

  // After the checks: the answer, sent once every refund has replied.
  absl::StatusOr<std::vector<Decision>> result;
  std::atomic<size_t> pending_refunds{0};

  std::vector<CheckItem> GroupItems(size_t group) const {
    std::vector<CheckItem> out;
    out.reserve(groups[group].size());
    for (size_t index : groups[group]) out.push_back(items[index]);
    return out;
  }
};

void RedisStoreImpl::CheckSlotsAsync(std::vector<CheckItem> items, const std::vector<int>& slots,
                                     std::optional<int64_t> now_micros, CheckCallback done) {
  auto check = std::make_shared<MultiSlotCheck>();
  check->store = this;
  check->items = std::move(items);
  check->groups = GroupBySlot(slots);
  check->done = std::move(done);
  const size_t groups = check->groups.size();
  {
    absl::MutexLock lock(&check->mu);
    check->replies.assign(groups, absl::UnavailableError("no reply"));
    check->pending = groups;
  }
  for (size_t group = 0; group < groups; ++group) {
    EvalCheckAsync(check->GroupItems(group), now_micros,
                   [check, group](absl::StatusOr<RedisReply> reply) {
                     bool last = false;
                     {
                       absl::MutexLock lock(&check->mu);
                       check->replies[group] = std::move(reply);
                       last = --check->pending == 0;
                     }
                     if (last) FinishMultiSlot(check);
                   });
  }
}

void RedisStoreImpl::FinishMultiSlot(const std::shared_ptr<MultiSlotCheck>& check) {
  std::vector<absl::StatusOr<RedisReply>> replies;
  {
    absl::MutexLock lock(&check->mu);
    replies.swap(check->replies);
  }
  // A slot's call that admitted its items (core/batch.h's BatchAllowed on its own items):
  // what it consumed stays unless another slot refuses or fails.
  struct Admitted {
    size_t group;
    std::vector<CheckItem> items;
    std::vector<Decision> decisions;  // as its script answered
    int64_t now_micros;
  };
  absl::Status error;
  bool all_allowed = true;
  std::vector<Decision> decisions(check->items.size());
  std::vector<Admitted> admitted;
  for (size_t group = 0; group < replies.size(); ++group) {
    std::vector<CheckItem> items = check->GroupItems(group);
    int64_t now = 0;
    absl::StatusOr<std::vector<Decision>> parsed =
        replies[group].ok() ? ParseCheckReply(*replies[group], items, &now)
                            : absl::StatusOr<std::vector<Decision>>(replies[group].status());
    if (!parsed.ok()) {
      if (error.ok()) error = parsed.status();
      all_allowed = false;
      continue;
    }
    for (size_t i = 0; i < parsed->size(); ++i) decisions[check->groups[group][i]] = (*parsed)[i];
    if (internal::BatchAllowed(items, *parsed)) {
      admitted.push_back({group, std::move(items), *std::move(parsed), now});
    } else {
      all_allowed = false;  // ParseCheckReply gave its items' costs back already
    }
  }
  if (all_allowed) {
    std::move(check->done)(std::move(decisions));
    return;
  }
  // Refused somewhere (or failed): nothing may stay consumed. In the answer, the admitting
  // slots' items keep allowed = true (they alone would pass) with the cost given back.
  for (const Admitted& group : admitted) {
    std::vector<Decision> answered = group.decisions;
    internal::GiveBackUncharged(group.items, absl::MakeSpan(answered));
    for (size_t i = 0; i < answered.size(); ++i) {
      decisions[check->groups[group.group][i]] = answered[i];
    }
  }
  if (error.ok()) {
    check->result = std::move(decisions);
  } else {
    check->result = error;
  }
  // What a slot's script consumed is given back: its allowed conditional items (a refused
  // shadow item took nothing; an item that is not conditional, such as a charge, stays
  // applied whatever the request does).
  struct Refund {
    std::vector<CheckItem> items;
    std::vector<Decision> decisions;
    int64_t now_micros;
  };
  std::vector<Refund> refunds;
  for (Admitted& group : admitted) {
    Refund refund{{}, {}, group.now_micros};
    for (size_t i = 0; i < group.items.size(); ++i) {
      if (!group.decisions[i].allowed || !IsConditional(group.items[i].op)) continue;
      refund.items.push_back(group.items[i]);
      refund.decisions.push_back(group.decisions[i]);
    }
    if (!refund.items.empty()) refunds.push_back(std::move(refund));
  }
  if (refunds.empty()) {
    std::move(check->done)(std::move(check->result));
    return;
  }
  check->pending_refunds.store(refunds.size());
  RedisStoreImpl* store = check->store;
  for (const Refund& refund : refunds) {
    const int slot = ItemSlot(store->options_.key_prefix, refund.items[0]);
    // A refund that fails leaves its consumption in place: an over-refusal until the
    // window ends or the bucket refills, never an over-admission.
    store->Send(
        slot,
        RefundCommand(store->options_.key_prefix, refund.items, refund.decisions,
                      refund.now_micros),
        [check](const absl::StatusOr<RedisReply>&) {
          if (check->pending_refunds.fetch_sub(1) == 1) {
            std::move(check->done)(std::move(check->result));
          }
        },
        OnlyDeclaredKeys(refund.items));
  }
}

}  // namespace tollgate::redis
