// Copyright tollgate authors.
#include "src/store/sync/round.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/algorithm/fixed_window.h"
#include "src/store/redis/slot.h"

namespace tollgate::sync {
namespace {

int64_t CeilMillis(int64_t micros) { return micros <= 0 ? 1 : (micros + 999) / 1000; }

int64_t Units(const Batch& batch) {
  int64_t units = 0;
  for (const CounterItem& item : batch.items) units += item.delta;
  return units;
}

}  // namespace

std::vector<std::string> ScriptCommand(std::string_view verb, std::string_view script,
                                       const CallContext& context, const SlotCall& call) {
  size_t items = 0;
  for (const Batch& batch : call.batches) items += batch.items.size();
  std::vector<std::string> args;
  args.reserve(9 + 2 * call.batches.size() + 9 * items);
  args.emplace_back(verb);
  args.emplace_back(script);
  args.push_back(absl::StrCat(1 + items));
  // On a cluster, one sequence key per slot, in that slot: a call touches no other.
  args.push_back(call.slot < 0
                     ? context.sequence_key
                     : absl::StrCat(context.sequence_key, ":{", redis::SlotTag(call.slot), "}"));
  for (const Batch& batch : call.batches) {
    for (const CounterItem& item : batch.items) args.push_back(item.counter_key);
  }
  args.push_back(absl::StrCat(context.sequence_ttl_ms));
  args.push_back(context.instance_id);
  args.push_back(absl::StrCat(context.instances));
  args.push_back(absl::StrCat(context.weigh_at_micros));
  args.push_back(absl::StrCat(call.batches.size()));
  for (const Batch& batch : call.batches) {
    args.push_back(absl::StrCat(batch.sequence));
    args.push_back(absl::StrCat(batch.items.size()));
    for (const CounterItem& item : batch.items) {
      args.push_back(absl::StrCat(item.delta));
      args.push_back(absl::StrCat(item.ttl_ms));
      args.push_back(absl::StrCat(item.limit));
      args.push_back(absl::StrCat(item.sliding ? item.window_micros : 0));
      args.push_back(absl::StrCat(item.window_index));
      args.push_back(absl::StrCat(item.demand));
      args.push_back(item.shares == Shares::kDemand ? "1" : "0");
      args.push_back(absl::StrCat(item.sync_interval_micros));
    }
  }
  return args;
}

absl::StatusOr<SlotReply> ParseReply(const redis::RedisReply& reply, const SlotCall& call) {
  using Type = redis::RedisReply::Type;
  if (reply.is_error()) return absl::InternalError(absl::StrCat("sync script failed: ", reply.str));
  const size_t items = call.batches.empty() ? 0 : call.batches.back().items.size();
  const bool well_formed =
      reply.type == Type::kArray && reply.elements.size() == 1 + 3 * items &&
      std::all_of(reply.elements.begin(), reply.elements.end(),
                  [](const redis::RedisReply& element) { return element.type == Type::kInteger; });
  if (!well_formed) {
    return absl::InternalError(absl::StrCat("unexpected sync script reply: ", DebugString(reply)));
  }
  SlotReply out;
  out.now_micros = reply.elements[0].integer;
  out.counters.reserve(items);
  for (size_t i = 0; i < items; ++i) {
    out.counters.push_back({reply.elements[1 + 3 * i].integer, reply.elements[2 + 3 * i].integer,
                            reply.elements[3 + 3 * i].integer});
  }
  return out;
}

bool Forgettable(const Entry& entry, int64_t clock_micros, int64_t now_micros) {
  const bool cold =
      entry.last_check_micros < clock_micros - kColdIntervals * entry.info->sync_interval_micros;
  return cold && !entry.HasDeltas() && now_micros >= entry.ExpiresAtMicros();
}

bool TakeCounters(Entry& entry, std::string_view entry_key, int64_t clock_micros,
                  int64_t now_micros, bool force, std::vector<CounterItem>& out) {
  const KeyInfo& info = *entry.info;
  const bool cold =
      entry.last_check_micros < clock_micros - kColdIntervals * info.sync_interval_micros;
  const bool due = force || clock_micros >= entry.next_sync_micros;
  if (!due || (cold && entry.unsent_current == 0 && entry.unsent_previous == 0)) return false;
  entry.next_sync_micros = clock_micros + info.sync_interval_micros;
  const int64_t w = entry.window_index;
  const int64_t window = info.numbers.window_micros;
  const bool sliding = info.numbers.algorithm == Algorithm::kSlidingWindow;
  // The previous window first: a sliding window's grant weighs its total. Counters live until
  // the end of the window after their own, so late deltas still land.
  if (sliding || entry.unsent_previous > 0) {
    out.push_back(CounterItem{.entry_key = std::string(entry_key),
                              .counter_key = absl::StrCat(info.counter_base, ":", w - 1),
                              .slot = info.slot,
                              .window_index = w - 1,
                              .window_micros = window,
                              .delta = entry.unsent_previous,
                              .ttl_ms = CeilMillis((w + 1) * window - now_micros)});
    entry.unacked_previous += entry.unsent_previous;
    entry.unsent_previous = 0;
  }
  out.push_back(CounterItem{.entry_key = std::string(entry_key),
                            .counter_key = absl::StrCat(info.counter_base, ":", w),
                            .slot = info.slot,
                            .window_index = w,
                            .window_micros = window,
                            .delta = entry.unsent_current,
                            .ttl_ms = CeilMillis((w + 2) * window - now_micros),
                            .limit = info.numbers.limit,
                            .sliding = sliding,
                            .demand = entry.demand,
                            .shares = info.shares,
                            .sync_interval_micros = info.sync_interval_micros});
  entry.unacked_current += entry.unsent_current;
  entry.unsent_current = 0;
  entry.demand = 0;
  return true;
}

void ApplyReply(Entry& entry, const CounterItem& item, const CounterReply* reply) {
  if (entry.window_index == item.window_index) {
    entry.unacked_current = std::max<int64_t>(0, entry.unacked_current - item.delta);
    if (reply == nullptr) return;
    entry.view_current = reply->total;
    if (reply->grant >= 0) {
      entry.grant_current = reply->grant;
      entry.grant_carried = false;
    }
    entry.next_first_share = reply->next_first_share;
  } else if (entry.window_index == item.window_index + 1) {
    entry.unacked_previous = std::max<int64_t>(0, entry.unacked_previous - item.delta);
    if (reply == nullptr) return;
    entry.view_previous = reply->total;
    // The reply to a sync sent before a sliding window's boundary: its grant (what the others
    // now hold for us) replaces the one carried over, less what was admitted since that
    // round took the entry (`unsent_previous`; this window's units are in LocalCurrent).
    if (reply->grant >= 0 && entry.grant_carried) {
      entry.grant_current = std::max<int64_t>(0, reply->grant - entry.unsent_previous);
    }
    // A fixed window's: the first share set aside for the window the entry is in now, which
    // it has not synced yet (one round at a time), replaces the one it started with.
    if (item.limit > 0 && entry.grant_current < 0) entry.first_share = reply->next_first_share;
  }
}

PendingBatches::Calls PendingBatches::Take(int64_t sequence, std::vector<CounterItem> items,
                                           int64_t now_micros) {
  std::map<int, Batch> fresh;
  for (CounterItem& item : items) {
    Batch& batch = fresh[item.slot];
    batch.sequence = sequence;
    batch.items.push_back(std::move(item));
  }
  std::vector<int> slots;
  for (const auto& [slot, batches] : pending_) slots.push_back(slot);
  for (const auto& [slot, batch] : fresh) {
    if (!pending_.contains(slot)) slots.push_back(slot);
  }
  Calls out;
  for (int slot : slots) {
    std::deque<Batch> batches;
    if (auto it = pending_.find(slot); it != pending_.end()) {
      batches = std::move(it->second);
      pending_.erase(it);
    }
    // Earlier batches lose the counters of windows that ended since (no decision reads them
    // any more), and their reads: only the last batch's totals and grants are used, so an
    // item without a delta has nothing left to do. A batch left empty is forgotten, so failed
    // rounds without deltas do not pile up while Redis is away.
    for (auto batch = batches.begin(); batch != batches.end();) {
      std::vector<CounterItem>& batch_items = batch->items;
      auto stale = std::remove_if(batch_items.begin(), batch_items.end(), [&](const auto& item) {
        return item.delta == 0 ||
               item.window_index < algorithm::WindowIndex(now_micros, item.window_micros) - 1;
      });
      for (auto item = stale; item != batch_items.end(); ++item) out.dropped_units += item->delta;
      batch_items.erase(stale, batch_items.end());
      batch = batch_items.empty() ? batches.erase(batch) : std::next(batch);
    }
    auto mine = fresh.find(slot);
    if (batches.empty() && mine == fresh.end()) continue;
    batches.push_back(mine != fresh.end() ? std::move(mine->second) : Batch{sequence, {}});
    while (batches.size() > kMaxPerCall) {
      out.dropped_units += Units(batches.front());
      out.given_up.push_back(std::move(batches.front()));
      batches.pop_front();
    }
    out.calls.push_back(SlotCall{
        slot, {std::make_move_iterator(batches.begin()), std::make_move_iterator(batches.end())}});
  }
  return out;
}

void PendingBatches::Keep(SlotCall call) {
  std::deque<Batch>& batches = pending_[call.slot];
  batches.insert(batches.begin(), std::make_move_iterator(call.batches.begin()),
                 std::make_move_iterator(call.batches.end()));
}

}  // namespace tollgate::sync
