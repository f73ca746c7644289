// Copyright tollgate authors.
#include "src/resilience/reconciler.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "src/algorithm/token_bucket_replay.h"

namespace tollgate::resilience {

Reconciler::Reconciler(Clock* clock, int64_t max_entries, int64_t batch_size,
                       ResilienceEventCallback on_event)
    : clock_(clock),
      max_entries_(max_entries),
      batch_size_(static_cast<size_t>(std::max<int64_t>(1, batch_size))) {
  counters_->on_event = std::move(on_event);
}

void Reconciler::Record(const std::vector<Admitted>& admitted, int64_t at_micros,
                        int64_t instances) {
  for (const Admitted& item : admitted) {
    const LimitNumbers& numbers = item.limit->numbers;
    const int64_t slice_micros =
        numbers.algorithm == Algorithm::kTokenBucket
            ? algorithm::ReplaySliceMicros(
                  {.capacity = numbers.capacity, .refill_per_second = numbers.refill_per_second})
            : std::max<int64_t>(1, numbers.window_micros);
    const int64_t index = at_micros / slice_micros;
    absl::MutexLock lock(&mutex_);
    Consumption& consumption = pending_[Key(item.limit->name, item.key)];
    consumption.limit = item.limit;
    consumption.instances = std::max(consumption.instances, instances);
    std::vector<Slice>& slices = consumption.slices;
    // Usually the last slice; answers on other threads may be recorded slightly out of order.
    auto it = slices.end();
    while (it != slices.begin() && (it - 1)->index > index) --it;
    if (it != slices.begin() && (it - 1)->index == index) {
      --it;
    } else {
      if (pending_entries_ >= max_entries_) {
        if (slices.empty()) pending_.erase(Key(item.limit->name, item.key));
        counters_->dropped.fetch_add(1, std::memory_order_relaxed);
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

std::vector<CheckItem> Reconciler::AddItems(absl::flat_hash_map<Key, Consumption>& pending,
                                            int64_t now_micros,
                                            std::vector<std::shared_ptr<const Limit>>& limits) {
  std::vector<CheckItem> items;
  for (auto& [key, consumption] : pending) {
    const LimitNumbers& numbers = consumption.limit->numbers;
    if (numbers.algorithm == Algorithm::kTokenBucket) {
      std::vector<algorithm::ConsumptionSlice> slices;
      slices.reserve(consumption.slices.size());
      for (const Slice& slice : consumption.slices) slices.push_back({slice.at_micros, slice.cost});
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
  return items;
}

void Reconciler::Reconcile(Store& store) {
  if (!has_pending_.load(std::memory_order_acquire)) return;
  absl::flat_hash_map<Key, Consumption> pending;
  int64_t dropped_by_bound = 0;
  {
    absl::MutexLock lock(&mutex_);
    pending.swap(pending_);
    pending_entries_ = 0;
    dropped_by_bound = dropped_since_reconcile_;
    dropped_since_reconcile_ = 0;
    has_pending_.store(false, std::memory_order_release);
  }
  std::vector<std::shared_ptr<const Limit>> limits;  // keep items[i].limit alive
  std::vector<CheckItem> items = AddItems(pending, clock_->NowMicros(), limits);
  const size_t batches = (items.size() + batch_size_ - 1) / batch_size_;
  if (batches == 0) {
    if (dropped_by_bound > 0) EmitReconciled(*counters_, 0, dropped_by_bound);
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
  for (size_t begin = 0; begin < items.size(); begin += batch_size_) {
    const size_t end = std::min(items.size(), begin + batch_size_);
    std::vector<CheckItem> batch(std::make_move_iterator(items.begin() + begin),
                                 std::make_move_iterator(items.begin() + end));
    const int64_t count = static_cast<int64_t>(batch.size());
    store.ApplyAsync(std::move(batch), [counters = counters_, round,
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

void Reconciler::EmitReconciled(const Counters& counters, int64_t added, int64_t dropped) {
  if (!counters.on_event) return;
  ResilienceEvent event;
  event.kind = ResilienceEvent::Kind::kReconciled;
  event.count = added;
  event.dropped = dropped;
  counters.on_event(event);
}

}  // namespace tollgate::resilience
