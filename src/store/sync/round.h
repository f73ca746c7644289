// Copyright tollgate authors. Sync mode's rounds as plain data: what a round takes from the
// entries, the script calls it sends (src/store/redis/lua/sync.lua), and what their replies
// change. No locks and no I/O: the key table (key_table.h) runs the entry functions under its
// shard locks, and the store (sync_store.cc) sends the calls.
//
// A round takes, from every key due for a sync, one counter item per window that still
// matters (the previous window's, for a sliding window or when it has unsent units, then the
// current one's, which asks for a grant). Items are grouped by the script call they go in: one
// per hash slot on a Redis Cluster, a single one on one server. Each call carries the group's
// batches of earlier rounds whose reply never came (Redis may or may not have applied them:
// their sequence numbers tell it), then this round's. Only the last batch's totals and grants
// are read back.
#ifndef TOLLGATE_SRC_STORE_SYNC_ROUND_H_
#define TOLLGATE_SRC_STORE_SYNC_ROUND_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "src/store/redis/resp.h"
#include "src/store/sync/entry.h"

namespace tollgate::sync {

// One window counter in a script call.
struct CounterItem {
  std::string entry_key;    // the entry's key in the table (limit name, '\0', key)
  std::string counter_key;  // <counter_base>:<window index>
  int slot = -1;            // the call it goes in (KeyInfo::slot)
  int64_t window_index = 0;
  int64_t window_micros = 0;
  int64_t delta = 0;   // units admitted here that this call counts
  int64_t ttl_ms = 0;  // the counter's and its grants' TTL when this call creates them
  // The current window's counter asks for a grant from this limit; 0 for the previous
  // window's counter (only counted, and weighed by the next item when sliding).
  int64_t limit = 0;
  // The current counter of a sliding window: the item before it is the previous window's.
  bool sliding = false;
  // Units asked of this instance (admitted or refused) since the key's last round: its weight
  // with Shares::kDemand.
  int64_t demand = 0;
  Shares shares = Shares::kDemand;
  int64_t sync_interval_micros = 0;  // how long a demand report stays fresh (kDemand)
};

// What Redis answers for one counter of a call's last batch.
struct CounterReply {
  int64_t total = 0;   // the counter, this call's delta included
  int64_t grant = -1;  // units this instance may admit before its next sync; -1: none asked
  // What this instance may spend in the next window before its first sync of it (Shares::
  // kDemand, fixed window); -1: none (then FirstShare(left, N, shares)).
  int64_t next_first_share = -1;
};

// The counters one round sends in one call, under the round's sequence number.
struct Batch {
  int64_t sequence = 0;
  std::vector<CounterItem> items;
};

// One script call: batches of earlier rounds whose reply never came, oldest first, then this
// round's (possibly empty).
struct SlotCall {
  int slot = -1;
  std::vector<Batch> batches;
};

// What every call of one instance carries besides its batches.
struct CallContext {
  // <prefix>sync:<instance id>: the last sequence number applied. A call for a cluster slot
  // uses <prefix>sync:<instance id>:{<redis::SlotTag(slot)>}, a key in that slot, so each
  // slot keeps its own sequence and every key of a call is in the call's slot.
  std::string sequence_key;
  int64_t sequence_ttl_ms = 24LL * 3600 * 1000;
  std::string instance_id;
  int64_t instances = 1;  // N
  // The time that weighs sliding windows: 0 for Redis TIME (production); a store on a
  // simulated clock sends its own.
  int64_t weigh_at_micros = 0;
};

// The reply to one call: the script's time and one CounterReply per item of the last batch.
struct SlotReply {
  int64_t now_micros = 0;
  std::vector<CounterReply> counters;
};

// The command for `call`: `verb` (EVALSHA or EVAL), `script` (its SHA1 or its text), then
// sync.lua's KEYS and ARGV (its header has the layout).
std::vector<std::string> ScriptCommand(std::string_view verb, std::string_view script,
                                       const CallContext& context, const SlotCall& call);

// The script's reply to `call`. InternalError for an error reply or a malformed one.
absl::StatusOr<SlotReply> ParseReply(const redis::RedisReply& reply, const SlotCall& call);

// Whether a round drops the entry: cold (no check for kColdIntervals intervals), nothing left
// to send or acknowledge, and its window (fixed) or the next (sliding) over.
bool Forgettable(const Entry& entry, int64_t clock_micros, int64_t now_micros);

// Appends the entry's counters to `out` when it is due (its interval has passed since it was
// last taken, or `force`), unless it is cold with nothing unsent; moves its unsent units to
// unacked and its demand into the items. Returns whether it took any. REQUIRES: the entry is
// in the window of `now_micros` (Roll).
bool TakeCounters(Entry& entry, std::string_view entry_key, int64_t clock_micros,
                  int64_t now_micros, bool force, std::vector<CounterItem>& out);

// Releases `item`'s units from the entry's unacked ones (acknowledged, or given up), and with
// `reply` (the call's last batch) takes the total as its view, the grant as its grant and the
// next window's first share. A reply to a sync sent before a window's boundary replaces a
// sliding window's carried grant, less what was admitted since that round took the entry, and
// a fixed window's first share.
void ApplyReply(Entry& entry, const CounterItem& item, const CounterReply* reply);

// The batches of one instance that were sent and not acknowledged, per call (slot). Not
// thread-safe: one round at a time.
class PendingBatches {
 public:
  // At most this many unacknowledged batches per call; beyond, the oldest is given up.
  static constexpr size_t kMaxPerCall = 256;

  struct Calls {
    std::vector<SlotCall> calls;  // one per slot with a batch to send, this round's last
    // Batches given up (over kMaxPerCall): their units must be released from the entries.
    std::vector<Batch> given_up;
    // Units that will never be counted: items of windows over, and the batches given up.
    int64_t dropped_units = 0;
  };

  // This round's calls: `items` (grouped by slot, under `sequence`) after each slot's pending
  // batches, from which items of windows over (before the previous one at `now_micros`) and
  // items without a delta (only the last batch is read back) are dropped first. A slot whose
  // pending batches are left empty and that has no new items gets no call. The calls own their
  // batches: hand a failed call back with Keep().
  Calls Take(int64_t sequence, std::vector<CounterItem> items, int64_t now_micros);

  // A call that failed: its batches wait for the next round, ahead of anything newer.
  void Keep(SlotCall call);

  bool empty() const { return pending_.empty(); }

 private:
  std::map<int, std::deque<Batch>> pending_;
};

}  // namespace tollgate::sync

#endif  // TOLLGATE_SRC_STORE_SYNC_ROUND_H_
