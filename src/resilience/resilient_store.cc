// Copyright tollgate authors.
#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "src/algorithm/share.h"
#include "src/algorithm/token_bucket_replay.h"
#include "src/core/batch.h"
#include "src/resilience/circuit_breaker.h"
#include "src/resilience/deadline_scheduler.h"
#include "tollgate/fallback_shares.h"
#include "tollgate/memory_store.h"
#include "tollgate/resilience.h"

namespace tollgate {

std::string_view CircuitStateName(CircuitState state) {
  switch (state) {
    case CircuitState::kClosed:
      return "closed";
    case CircuitState::kOpen:
      return "open";
    case CircuitState::kHalfOpen:
      return "half_open";
  }
  return "unknown";
}

std::string_view ResilienceEventName(ResilienceEvent::Kind kind) {
  switch (kind) {
    case ResilienceEvent::Kind::kStoreUnreachable:
      return "store_unreachable";
    case ResilienceEvent::Kind::kStoreReachable:
      return "store_reachable";
    case ResilienceEvent::Kind::kBreakerOpened:
      return "breaker_opened";
    case ResilienceEvent::Kind::kBreakerClosed:
      return "breaker_closed";
    case ResilienceEvent::Kind::kFallbackStarted:
      return "fallback_started";
    case ResilienceEvent::Kind::kFallbackEnded:
      return "fallback_ended";
    case ResilienceEvent::Kind::kReconciled:
      return "reconciled";
    case ResilienceEvent::Kind::kInstanceCountChanged:
      return "instance_count_changed";
    case ResilienceEvent::Kind::kReplicasNotConfirming:
      return "replicas_not_confirming";
    case ResilienceEvent::Kind::kReplicasConfirming:
      return "replicas_confirming";
  }
  return "unknown";
}

namespace resilience {
namespace {

bool SameNumbers(const LimitNumbers& a, const LimitNumbers& b) {
  return a.algorithm == b.algorithm && a.capacity == b.capacity &&
         a.refill_per_second == b.refill_per_second && a.limit == b.limit &&
         a.window_micros == b.window_micros;
}

// Store round trips, recorded lock-free (relaxed atomics: a snapshot may be mid-update by
// one observation, which Prometheus tolerates).
class RoundTripHistogram {
 public:
  void Observe(int64_t micros) {
    micros = std::max<int64_t>(micros, 0);
    const auto bound = std::lower_bound(kStoreRoundTripBucketsMicros.begin(),
                                        kStoreRoundTripBucketsMicros.end(), micros);
    counts_[bound - kStoreRoundTripBucketsMicros.begin()].fetch_add(1, std::memory_order_relaxed);
    sum_micros_.fetch_add(micros, std::memory_order_relaxed);
  }

  StoreRoundTripHistogram Snapshot() const {
    StoreRoundTripHistogram snapshot;
    for (size_t i = 0; i < counts_.size(); ++i) {
      snapshot.counts[i] = counts_[i].load(std::memory_order_relaxed);
      snapshot.count += snapshot.counts[i];
    }
    snapshot.sum_micros = sum_micros_.load(std::memory_order_relaxed);
    return snapshot;
  }

 private:
  std::array<std::atomic<int64_t>, kStoreRoundTripBucketsMicros.size() + 1> counts_{};
  std::atomic<int64_t> sum_micros_{0};
};

// Shared with the kAdd batches' callbacks (which must not keep the Core, and so the store, alive).
struct ReconcileCounters {
  std::atomic<int64_t> reconciled{0};
  std::atomic<int64_t> dropped{0};
  ResilienceEventCallback on_event;
};

// Fallback consumption of one (limit name, key) not yet added to the store, one slice per
// window of a window limit or per time slice of a token bucket (ReplaySliceMicros), in
// time order.
struct Slice {
  int64_t index = 0;      // the window or time slice
  int64_t cost = 0;       // summed
  int64_t at_micros = 0;  // the latest consumption recorded in it
};
struct Consumption {
  std::shared_ptr<const Limit> limit;  // a copy of the shared limit, kept for the kAdd items
  std::vector<Slice> slices;
  // The largest N the fallback answered with while recording: the share the consumption is
  // replayed against (N read at reconciliation may be a restarted Redis' partial count).
  int64_t instances = 1;
};
using ReconcileKey = std::pair<std::string, std::string>;

// What a fallback answer admitted, with copies of the limits that outlive the caller's.
struct Admitted {
  std::shared_ptr<const Limit> limit;
  std::string key;
  int64_t cost = 0;
  // A check's consumption (applied in the store only if its batch passed there), not a
  // charge (applied in the store whatever the batch did).
  bool conditional = true;
};

// One call in flight: answered exactly once, by the store or by the deadline. When the
// deadline answers it from a failure policy that admits, what was admitted is held here
// until the store's late reply settles it: consumed in the store (allowed), it is dropped;
// refused or failed, it is recorded for reconciliation. The store calls back exactly once,
// so nothing stays held.
struct PendingCall {
  std::atomic<bool> answered{false};
  CheckCallback done;
  std::vector<CheckItem> items;  // kept for the fallback answer
  bool probe = false;
  // Each item's op, for a late reply (`items` is moved to the fallback by then), when the
  // batch has any op but kCheck; empty otherwise.
  std::vector<ItemOp> ops;

  absl::Mutex settle_mutex;
  bool reply_seen ABSL_GUARDED_BY(settle_mutex) = false;
  bool reply_consumed ABSL_GUARDED_BY(settle_mutex) = false;
  bool reply_answered ABSL_GUARDED_BY(settle_mutex) = false;
  bool held ABSL_GUARDED_BY(settle_mutex) = false;
  std::vector<Admitted> held_items ABSL_GUARDED_BY(settle_mutex);
  int64_t held_at_micros ABSL_GUARDED_BY(settle_mutex) = 0;
  int64_t held_instances ABSL_GUARDED_BY(settle_mutex) = 1;
};

// Everything a pending call needs, kept alive by the call's callbacks.
class Core {
 public:
  Core(std::shared_ptr<Store> primary, ResilienceOptions options,
       std::unique_ptr<MemoryStore> fallback)
      : primary_(std::move(primary)),
        options_(std::move(options)),
        clock_(options_.clock != nullptr ? options_.clock : &SystemClock()),
        breaker_(options_.breaker, clock_),
        fallback_(std::move(fallback)) {
    reconcile_counters_->on_event = options_.on_event;
  }

  Store& primary() { return *primary_; }

  void Emit(ResilienceEvent::Kind kind, int64_t count = 0, std::string detail = "") {
    if (!options_.on_event) return;
    ResilienceEvent event;
    event.kind = kind;
    event.count = count;
    event.detail = std::move(detail);
    options_.on_event(event);
  }

  void RecordFailure(bool probe, std::string_view why) {
    if (breaker_.RecordFailure(probe)) {
      Emit(ResilienceEvent::Kind::kBreakerOpened, options_.breaker.failure_threshold,
           std::string(why));
    }
  }
  CircuitBreaker& breaker() { return breaker_; }

  // The store answered: closes the breaker, ends a fallback episode and reconciles.
  void RecordSuccess(bool probe) {
    if (breaker_.RecordSuccess(probe)) Emit(ResilienceEvent::Kind::kBreakerClosed);
    if (in_fallback_.load(std::memory_order_relaxed) && in_fallback_.exchange(false)) {
      Emit(ResilienceEvent::Kind::kFallbackEnded, episode_decisions_.exchange(0));
    }
    Reconcile();
  }

  // Answers `items` from each limit's failure policy, all or nothing. `hold`: the call whose
  // store request is still out (the deadline passed), whose reply settles what is admitted;
  // nullptr: nothing is out, what is admitted is recorded at once.
  // A charge is applied locally and recorded for reconciliation whatever its limit's policy
  // (it happened). Reservations and
  // leases taken here are the local store's own (a concurrency limit's share is local slots,
  // never reconciled); a settle, release or renewal the local store does not know (a
  // reservation or lease of the shared store) is answered Unavailable, since the shared store
  // cannot apply it now.
  // `store_counted`: the store answered and counted the call, but no replica confirmed it
  // (UnconfirmedWriteError): not an episode of the store's absence, and nothing the fallback
  // admits is reconciled into the store.
  void AnswerFromPolicy(std::vector<CheckItem> items, CheckCallback done,
                        const std::shared_ptr<PendingCall>& hold = nullptr,
                        bool store_counted = false) {
    fallback_decisions_.fetch_add(1, std::memory_order_relaxed);
    const int64_t instances = Instances();
    if (!store_counted) {
      episode_decisions_.fetch_add(1, std::memory_order_relaxed);
      if (!in_fallback_.load(std::memory_order_relaxed) && !in_fallback_.exchange(true)) {
        Emit(ResilienceEvent::Kind::kFallbackStarted, instances, SharesInUse(instances));
      }
    }
    bool any_fail_closed = false;
    // Keeps the substituted limits alive until the (inline) memory store has answered.
    std::vector<std::shared_ptr<const Limit>> substitutes;
    substitutes.reserve(items.size());
    for (CheckItem& item : items) {
      if (item.limit->on_store_failure == FailureMode::kFailClosed) any_fail_closed = true;
      substitutes.push_back(FallbackLimit(*item.limit, instances));
    }
    std::vector<CheckItem> local_items;
    local_items.reserve(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      CheckItem local{substitutes[i].get(), items[i].key, items[i].cost};
      local.shadow = items[i].shadow;
      local.op = items[i].op;
      local.id = items[i].id;
      // With a fail_closed limit in the batch no check may consume: they only peek.
      if (any_fail_closed && IsConditional(local.op)) {
        local.cost = 0;
        local.op = ItemOp::kCheck;
        local.id.clear();
      }
      local_items.push_back(std::move(local));
    }
    auto answer = [&](absl::StatusOr<std::vector<Decision>> decisions) {
      if (!decisions.ok()) {
        std::move(done)(decisions.status());
        return;
      }
      const bool batch_allowed = !any_fail_closed && internal::BatchAllowed(items, *decisions);
      // What the fallback consumed: the checks of a batch it admitted (a refused shadow
      // item took nothing), and every charge.
      std::vector<CheckItem> consumed;
      for (size_t i = 0; i < items.size(); ++i) {
        const bool conditional = IsConditional(items[i].op);
        if ((conditional && batch_allowed && (*decisions)[i].allowed) ||
            items[i].op == ItemOp::kCharge) {
          consumed.push_back(items[i]);
        }
      }
      if (!store_counted) Admit(consumed, instances, hold);
      for (size_t i = 0; i < decisions->size(); ++i) {
        const ItemOp op = items[i].op;
        if ((op == ItemOp::kSettle || op == ItemOp::kRelease || op == ItemOp::kRenew) &&
            (*decisions)[i].reason == DenyReason::kNotFound) {
          std::move(done)(absl::UnavailableError(
              absl::StrCat("the store is unavailable: cannot settle, release or renew for limit '",
                           items[i].limit->name, "' now; retry")));
          return;
        }
      }
      for (size_t i = 0; i < decisions->size(); ++i) {
        Decision& decision = (*decisions)[i];
        decision.source = DecisionSource::kFallback;
        if (items[i].limit->on_store_failure == FailureMode::kFailClosed &&
            IsConditional(items[i].op)) {
          decision.allowed = false;
          decision.reason = DenyReason::kStoreUnavailable;
          decision.limit = items[i].limit->numbers.MaxCost();
          decision.remaining = 0;
          // The outage's wait, not the window's: nothing is known of the shared state
          // until the store answers, which may be at the next probe.
          decision.retry_after_micros = options_.fail_closed_retry_after_ms * 1000;
          decision.reset_after_micros = decision.retry_after_micros;
        }
      }
      std::move(done)(std::move(decisions));
    };
    fallback_->ApplyAsync(std::move(local_items), answer);
  }

  // The store's reply to `call` came after the deadline had answered it.
  void SettleLateReply(PendingCall& call, const absl::StatusOr<std::vector<Decision>>& decisions) {
    // Whether the store applied the checks (the batch passed there); it applied the charges
    // whenever it answered.
    const bool answered = decisions.ok();
    bool consumed = answered;
    if (answered) {
      for (size_t i = 0; i < decisions->size(); ++i) {
        const bool conditional = i >= call.ops.size() || IsConditional(call.ops[i]);
        consumed &= (*decisions)[i].allowed || !conditional;
      }
    }
    std::vector<Admitted> held;
    int64_t held_at = 0;
    int64_t held_instances = 1;
    {
      absl::MutexLock lock(&call.settle_mutex);
      call.reply_seen = true;
      call.reply_consumed = consumed;
      call.reply_answered = answered;
      if (!call.held) {
        late_replies_.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      call.held = false;
      held.swap(call.held_items);
      held_at = call.held_at_micros;
      held_instances = call.held_instances;
    }
    // What the store did not apply is recorded for reconciliation.
    std::erase_if(held,
                  [&](const Admitted& item) { return item.conditional ? consumed : answered; });
    if (held.empty()) {
      late_replies_settled_.fetch_add(1, std::memory_order_relaxed);
    } else {
      Record(held, held_at, held_instances);
    }
    // Counted after the record: once late_replies matches deadlines_missed, all that the
    // late replies leave for reconciliation is recorded.
    late_replies_.fetch_add(1, std::memory_order_relaxed);
  }

  std::atomic<int64_t> store_decisions_{0};
  std::atomic<int64_t> fallback_decisions_{0};
  std::atomic<int64_t> store_errors_{0};
  std::atomic<int64_t> deadlines_missed_{0};
  std::atomic<int64_t> breaker_rejections_{0};
  std::atomic<int64_t> late_replies_{0};
  std::atomic<int64_t> late_replies_settled_{0};
  RoundTripHistogram round_trips_;
  const std::shared_ptr<ReconcileCounters> reconcile_counters_ =
      std::make_shared<ReconcileCounters>();

  // Called when the store has answered: sends the fallback consumption recorded so far to
  // it as kAdd batches, and forgets it (best effort: a failed batch is counted
  // as dropped, not retried). A window's slices go as they are (each as of its time); a
  // token bucket's slices are replayed against this instance's share and what they still
  // owe now goes as one item (algorithm/token_bucket_replay.h). Cheap when nothing is
  // recorded.
  void Reconcile() {
    if (!has_pending_.load(std::memory_order_acquire)) return;
    absl::flat_hash_map<ReconcileKey, Consumption> pending;
    int64_t dropped_by_bound = 0;
    {
      absl::MutexLock lock(&reconcile_mutex_);
      pending.swap(pending_);
      pending_entries_ = 0;
      dropped_by_bound = dropped_since_reconcile_;
      dropped_since_reconcile_ = 0;
      has_pending_.store(false, std::memory_order_release);
    }
    const int64_t now_micros = clock_->NowMicros();
    std::vector<CheckItem> items;
    std::vector<std::shared_ptr<const Limit>> limits;  // keep items[i].limit alive
    for (auto& [key, consumption] : pending) {
      const LimitNumbers& numbers = consumption.limit->numbers;
      if (numbers.algorithm == Algorithm::kTokenBucket) {
        std::vector<algorithm::ConsumptionSlice> slices;
        slices.reserve(consumption.slices.size());
        for (const Slice& slice : consumption.slices) {
          slices.push_back({slice.at_micros, slice.cost});
        }
        const int64_t owed = algorithm::TokenBucketOwedTokens(
            slices, now_micros,
            {.capacity = numbers.capacity, .refill_per_second = numbers.refill_per_second},
            consumption.instances);
        if (owed <= 0) continue;  // refilled since: nothing to charge
        items.push_back(CheckItem{consumption.limit.get(), key.second, owed, now_micros});
        items.back().op = ItemOp::kAdd;
      } else {
        for (const Slice& slice : consumption.slices) {
          items.push_back(
              CheckItem{consumption.limit.get(), key.second, slice.cost, slice.at_micros});
          items.back().op = ItemOp::kAdd;
        }
      }
      limits.push_back(std::move(consumption.limit));
    }
    const size_t batch_size =
        static_cast<size_t>(std::max<int64_t>(1, options_.reconcile_batch_size));
    const size_t batches = (items.size() + batch_size - 1) / batch_size;
    if (batches == 0) {
      if (dropped_by_bound > 0) EmitReconciled(*reconcile_counters_, 0, dropped_by_bound);
      return;
    }
    // The last batch to finish reports the round.
    struct Round {
      std::atomic<size_t> outstanding;
      std::atomic<int64_t> added{0};
      std::atomic<int64_t> dropped;
      std::vector<std::shared_ptr<const Limit>> limits;
    };
    auto round = std::make_shared<Round>();
    round->outstanding.store(batches);
    round->dropped.store(dropped_by_bound);
    round->limits = std::move(limits);
    for (size_t begin = 0; begin < items.size(); begin += batch_size) {
      const size_t end = std::min(items.size(), begin + batch_size);
      std::vector<CheckItem> batch(std::make_move_iterator(items.begin() + begin),
                                   std::make_move_iterator(items.begin() + end));
      const int64_t count = static_cast<int64_t>(batch.size());
      primary_->ApplyAsync(
          std::move(batch), [counters = reconcile_counters_, round,
                             count](const absl::StatusOr<std::vector<Decision>>& added) {
            const absl::Status& status = added.status();
            (status.ok() ? counters->reconciled : counters->dropped)
                .fetch_add(count, std::memory_order_relaxed);
            (status.ok() ? round->added : round->dropped).fetch_add(count);
            if (round->outstanding.fetch_sub(1) == 1) {
              EmitReconciled(*counters, round->added.load(), round->dropped.load());
            }
          });
    }
  }

 private:
  static void EmitReconciled(const ReconcileCounters& counters, int64_t added, int64_t dropped) {
    if (!counters.on_event) return;
    ResilienceEvent event;
    event.kind = ResilienceEvent::Kind::kReconciled;
    event.count = added;
    event.dropped = dropped;
    counters.on_event(event);
  }

  int64_t Instances() const {
    return options_.instance_count ? std::max<int64_t>(1, options_.instance_count()) : 1;
  }

 public:
  // Counts the requests (items, whatever their cost) asked of a fail_open limit with
  // demand-weighted shares (checks, reservations and charges; admitted or refused), for
  // FallbackShares: a share is learned from how many requests came, which a few large costs
  // do not swing.
  void CountDemand(const std::vector<CheckItem>& items) {
    FallbackShares* shares = options_.fallback_shares.get();
    if (shares == nullptr) return;
    for (const CheckItem& item : items) {
      if (UsesDemandShares(*item.limit) && item.cost > 0 &&
          (item.op == ItemOp::kCheck || item.op == ItemOp::kReserve ||
           item.op == ItemOp::kCharge)) {
        shares->Count(item.limit->name, 1);
      }
    }
  }

 private:
  bool UsesDemandShares(const Limit& limit) const {
    return options_.fallback_shares != nullptr && limit.shares == Shares::kDemand &&
           limit.on_store_failure == FailureMode::kFailOpen &&
           limit.numbers.algorithm != Algorithm::kConcurrency;
  }

  // The weights of `limit`'s fail_open share: its learned fraction with demand-weighted
  // shares, else exactly 1/N.
  algorithm::ShareWeights FallbackWeights(const Limit& limit, int64_t instances) const {
    if (!UsesDemandShares(limit)) return algorithm::EqualWeights(instances);
    return algorithm::FallbackFractionWeights(
        options_.fallback_shares->Fraction(limit.name, instances), instances);
  }

  // For the fallback-started event: the fail_open shares in use with `instances` live.
  std::string SharesInUse(int64_t instances) const {
    std::string text = absl::StrCat("fail_open shares with N=", instances, ": ");
    if (options_.fallback_shares == nullptr) return absl::StrCat(text, "limit / N each");
    constexpr size_t kListed = 8;
    const std::vector<std::pair<std::string, double>> fractions =
        options_.fallback_shares->Fractions(instances);
    for (size_t i = 0; i < std::min(fractions.size(), kListed); ++i) {
      absl::StrAppend(&text, fractions[i].first, " ", absl::StrFormat("%.3f", fractions[i].second),
                      ", ");
    }
    if (fractions.size() > kListed) {
      absl::StrAppend(&text, "and ", fractions.size() - kListed, " more by demand, ");
    }
    return absl::StrCat(text, fractions.empty() ? "" : "others ", "1/N");
  }

  // What a fallback answer admitted: recorded now, or held for the late reply of `hold`.
  void Admit(const std::vector<CheckItem>& items, int64_t instances,
             const std::shared_ptr<PendingCall>& hold) {
    const int64_t now_micros = clock_->NowMicros();
    std::vector<Admitted> admitted;
    admitted.reserve(items.size());
    for (const CheckItem& item : items) {
      // A lease taken locally is the fallback's own: it expires there, nothing to reconcile.
      if (item.cost <= 0 || item.limit->numbers.algorithm == Algorithm::kConcurrency) continue;
      admitted.push_back(
          Admitted{SharedLimit(*item.limit), item.key, item.cost, IsConditional(item.op)});
    }
    if (admitted.empty()) return;
    if (hold != nullptr) {
      absl::MutexLock lock(&hold->settle_mutex);
      if (!hold->reply_seen) {
        hold->held = true;
        hold->held_items = std::move(admitted);
        hold->held_at_micros = now_micros;
        hold->held_instances = instances;
        return;
      }
      // The store's reply came first: keep what it did not apply.
      std::erase_if(admitted, [&](const Admitted& item) {
        return item.conditional ? hold->reply_consumed : hold->reply_answered;
      });
      if (admitted.empty()) {
        late_replies_settled_.fetch_add(1, std::memory_order_relaxed);
        return;
      }
    }
    Record(admitted, now_micros, instances);
  }

  // Records consumption admitted at `at_micros`, for Reconcile.
  void Record(const std::vector<Admitted>& admitted, int64_t at_micros, int64_t instances) {
    for (const Admitted& item : admitted) {
      const LimitNumbers& numbers = item.limit->numbers;
      const int64_t slice_micros =
          numbers.algorithm == Algorithm::kTokenBucket
              ? algorithm::ReplaySliceMicros(
                    {.capacity = numbers.capacity, .refill_per_second = numbers.refill_per_second})
              : std::max<int64_t>(1, numbers.window_micros);
      const int64_t index = at_micros / slice_micros;
      absl::MutexLock lock(&reconcile_mutex_);
      Consumption& consumption = pending_[ReconcileKey(item.limit->name, item.key)];
      consumption.limit = item.limit;
      consumption.instances = std::max(consumption.instances, instances);
      std::vector<Slice>& slices = consumption.slices;
      // Usually the last slice; answers on other threads may be recorded slightly out of
      // order.
      auto it = slices.end();
      while (it != slices.begin() && (it - 1)->index > index) --it;
      if (it != slices.begin() && (it - 1)->index == index) {
        --it;
      } else {
        if (pending_entries_ >= options_.reconcile_max_entries) {
          if (slices.empty()) pending_.erase(ReconcileKey(item.limit->name, item.key));
          reconcile_counters_->dropped.fetch_add(1, std::memory_order_relaxed);
          ++dropped_since_reconcile_;
          has_pending_.store(true, std::memory_order_release);
          continue;
        }
        it = slices.insert(it, Slice{index, 0, 0});
        ++pending_entries_;
      }
      it->cost += item.cost;
      it->at_micros = std::max(it->at_micros, at_micros);
      has_pending_.store(true, std::memory_order_release);
    }
  }

  // A copy of `limit` that lives as long as the reconciliation needs it (the caller's
  // Limit only lives until its own call is answered).
  std::shared_ptr<const Limit> SharedLimit(const Limit& limit) {
    absl::MutexLock lock(&mutex_);
    std::shared_ptr<const Limit>& cached = shared_limits_[limit.name];
    if (cached == nullptr || !SameNumbers(cached->numbers, limit.numbers)) {
      cached = std::make_shared<Limit>(limit);
    }
    return cached;
  }

  // The limit the local fallback uses for `limit` with `instances` live instances.
  std::shared_ptr<const Limit> FallbackLimit(const Limit& limit, int64_t instances) {
    const LimitNumbers numbers =
        limit.on_store_failure == FailureMode::kLocal && limit.local
            ? *limit.local
            : algorithm::FallbackNumbers(limit.numbers, FallbackWeights(limit, instances));
    absl::MutexLock lock(&mutex_);
    std::shared_ptr<const Limit>& cached = fallback_limits_[limit.name];
    if (cached == nullptr || cached->numbers.algorithm != numbers.algorithm ||
        cached->numbers.capacity != numbers.capacity ||
        cached->numbers.refill_per_second != numbers.refill_per_second ||
        cached->numbers.limit != numbers.limit ||
        cached->numbers.window_micros != numbers.window_micros) {
      auto substitute = std::make_shared<Limit>(limit);
      substitute->numbers = numbers;
      cached = std::move(substitute);
    }
    return cached;
  }

  std::shared_ptr<Store> primary_;
  const ResilienceOptions options_;
  Clock* const clock_;
  CircuitBreaker breaker_;
  std::unique_ptr<MemoryStore> fallback_;
  absl::Mutex mutex_;
  absl::flat_hash_map<std::string, std::shared_ptr<const Limit>> fallback_limits_
      ABSL_GUARDED_BY(mutex_);
  absl::flat_hash_map<std::string, std::shared_ptr<const Limit>> shared_limits_
      ABSL_GUARDED_BY(mutex_);
  absl::Mutex reconcile_mutex_;
  absl::flat_hash_map<ReconcileKey, Consumption> pending_ ABSL_GUARDED_BY(reconcile_mutex_);
  int64_t pending_entries_ ABSL_GUARDED_BY(reconcile_mutex_) = 0;  // slices in pending_
  int64_t dropped_since_reconcile_ ABSL_GUARDED_BY(reconcile_mutex_) = 0;
  std::atomic<bool> has_pending_{false};
  std::atomic<bool> in_fallback_{false};
  std::atomic<int64_t> episode_decisions_{0};
};

class ResilientStoreImpl final : public ResilientStore {
 public:
  ResilientStoreImpl(std::shared_ptr<Core> core, std::shared_ptr<Timers> timers)
      : core_(std::move(core)), timers_(std::move(timers)) {}

  void ApplyAsync(std::vector<CheckItem> items, CheckCallback done) override {
    if (!items.empty() && items.front().op == ItemOp::kAdd) {
      // Straight to the wrapped store: no deadline (nobody waits on it) and no fallback.
      core_->primary().ApplyAsync(std::move(items), std::move(done));
      return;
    }
    Send(std::move(items), std::move(done));
  }

 private:
  // ApplyAsync on the wrapped store, within the deadline.
  void Send(std::vector<CheckItem> items, CheckCallback done) {
    core_->CountDemand(items);
    const CircuitBreaker::Admission admission = core_->breaker().Admit();
    if (admission == CircuitBreaker::Admission::kReject) {
      core_->breaker_rejections_.fetch_add(1, std::memory_order_relaxed);
      core_->AnswerFromPolicy(std::move(items), std::move(done));
      return;
    }
    int64_t timeout_micros = items.front().limit->timeout_micros;
    for (const CheckItem& item : items) {
      timeout_micros = std::min(timeout_micros, item.limit->timeout_micros);
    }
    auto call = std::make_shared<PendingCall>();
    call->done = std::move(done);
    call->items = items;
    call->probe = admission == CircuitBreaker::Admission::kProbe;
    if (std::any_of(items.begin(), items.end(),
                    [](const CheckItem& item) { return item.op != ItemOp::kCheck; })) {
      call->ops.reserve(items.size());
      for (const CheckItem& item : items) call->ops.push_back(item.op);
    }

    std::shared_ptr<Core> core = core_;
    const int64_t sent_micros = DeadlineScheduler::MonotonicMicros();
    // Cancelled by the answer: the timers wake only for calls still unanswered. The entry
    // holds the core weakly: a timer queue that outlives the store (loop timers drop theirs
    // when the loop is destroyed) must not keep the Redis store alive past its loops. While
    // the primary still owes an answer its callback holds the core, so an expired core
    // means the call was answered.
    timers_->RunAfter(timeout_micros, &call->answered,
                      [weak_core = std::weak_ptr<Core>(core), call] {
                        std::shared_ptr<Core> core = weak_core.lock();
                        if (core == nullptr || call->answered.exchange(true)) return;
                        core->deadlines_missed_.fetch_add(1, std::memory_order_relaxed);
                        core->RecordFailure(call->probe, "deadline missed");
                        CheckCallback done = std::move(call->done);
                        call->done = nullptr;
                        core->AnswerFromPolicy(std::move(call->items), std::move(done), call);
                      });
    auto on_reply = [core, call, sent_micros](absl::StatusOr<std::vector<Decision>> decisions) {
      core->round_trips_.Observe(DeadlineScheduler::MonotonicMicros() - sent_micros);
      if (call->answered.exchange(true)) {
        core->SettleLateReply(*call, decisions);
        return;
      }
      // Moved out so the caller's callback (and what it owns) dies now,
      // not when the deadline timer lets go of the call.
      CheckCallback done = std::move(call->done);
      call->done = nullptr;
      std::vector<CheckItem> items = std::move(call->items);
      if (decisions.ok()) {
        core->store_decisions_.fetch_add(1, std::memory_order_relaxed);
        // Reconciles before answering, so that on one connection the added
        // consumption precedes this caller's next check.
        core->RecordSuccess(call->probe);
        std::move(done)(std::move(decisions));
        return;
      }
      if (IsUnconfirmedWrite(decisions.status())) {
        // The store is up; a durable limit's replica did not confirm: its policy answers,
        // and the breaker, which guards every limit, counts an answer.
        if (core->breaker().RecordSuccess(call->probe)) {
          core->Emit(ResilienceEvent::Kind::kBreakerClosed);
        }
        core->AnswerFromPolicy(std::move(items), std::move(done), nullptr,
                               /*store_counted=*/true);
        return;
      }
      core->store_errors_.fetch_add(1, std::memory_order_relaxed);
      core->RecordFailure(call->probe, std::string(decisions.status().message()));
      core->AnswerFromPolicy(std::move(items), std::move(done));
    };
    core->primary().ApplyAsync(std::move(items), std::move(on_reply));
  }

 public:
  std::string_view Name() const override { return core_->primary().Name(); }

  CircuitState circuit_state() const override { return core_->breaker().state(); }

  ResilienceStats stats() const override {
    ResilienceStats stats;
    stats.store_decisions = core_->store_decisions_.load();
    stats.fallback_decisions = core_->fallback_decisions_.load();
    stats.store_errors = core_->store_errors_.load();
    stats.deadlines_missed = core_->deadlines_missed_.load();
    stats.breaker_rejections = core_->breaker_rejections_.load();
    stats.late_replies = core_->late_replies_.load();
    stats.late_replies_settled = core_->late_replies_settled_.load();
    stats.reconciled_items = core_->reconcile_counters_->reconciled.load();
    stats.reconcile_dropped_items = core_->reconcile_counters_->dropped.load();
    return stats;
  }

  StoreRoundTripHistogram store_round_trips() const override {
    return core_->round_trips_.Snapshot();
  }

 private:
  std::shared_ptr<Core> core_;
  // Declared after core_, so released first (ThreadTimers, when this store owns them,
  // answer every pending deadline at once and join). Their callbacks own the Core they
  // use; the Core never owns the timers.
  std::shared_ptr<Timers> timers_;
};

}  // namespace
}  // namespace resilience

absl::StatusOr<std::unique_ptr<ResilientStore>> ResilientStore::Create(
    std::shared_ptr<Store> primary, ResilienceOptions options) {
  if (primary == nullptr) return absl::InvalidArgumentError("ResilientStore needs a store");
  if (options.breaker.failure_threshold < 1) {
    return absl::InvalidArgumentError("circuit breaker failure_threshold must be >= 1");
  }
  if (options.reconcile_max_entries < 0 || options.reconcile_batch_size < 1) {
    return absl::InvalidArgumentError(
        "reconcile_max_entries must be >= 0 and reconcile_batch_size >= 1");
  }
  if (options.breaker.open_duration_ms < 1) {
    return absl::InvalidArgumentError("circuit breaker open_duration_ms must be >= 1");
  }
  MemoryStoreOptions memory_options;
  memory_options.clock = options.clock;
  memory_options.max_keys = options.fallback_max_keys;
  absl::StatusOr<std::unique_ptr<MemoryStore>> fallback = MemoryStore::Create(memory_options);
  if (!fallback.ok()) return fallback.status();
  std::shared_ptr<Timers> timers =
      options.timers != nullptr ? std::move(options.timers) : ThreadTimers();
  options.timers = nullptr;
  auto core = std::make_shared<resilience::Core>(std::move(primary), std::move(options),
                                                 std::move(*fallback));
  return std::unique_ptr<ResilientStore>(
      new resilience::ResilientStoreImpl(std::move(core), std::move(timers)));
}

}  // namespace tollgate
