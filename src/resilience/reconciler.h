// Copyright tollgate authors. What the fallback consumed while the store could not answer,
// added to the store once it answers again.
#ifndef TOLLGATE_SRC_RESILIENCE_RECONCILER_H_
#define TOLLGATE_SRC_RESILIENCE_RECONCILER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "tollgate/clock.h"
#include "tollgate/limit.h"
#include "tollgate/resilience.h"
#include "tollgate/store.h"

namespace tollgate::resilience {

// What a fallback answer admitted, with a copy of the limit that outlives the caller's.
struct Admitted {
  std::shared_ptr<const Limit> limit;
  std::string key;
  int64_t cost = 0;
  // A check's consumption (applied in the store only if its batch passed there), not a
  // charge (applied in the store whatever the batch did).
  bool conditional = true;
};

// Fallback consumption not yet in the store: recorded (Record) while the store fails, added
// to it as kAdd batches (Reconcile) once it answers again. Each (limit, key) keeps one slice
// per window of a window limit, or per time slice of a token bucket (ReplaySliceMicros), in
// time order; at most `max_entries` slices in all, beyond which consumption is dropped and
// counted. Thread-safe.
class Reconciler {
 public:
  Reconciler(Clock* clock, int64_t max_entries, int64_t batch_size,
             ResilienceEventCallback on_event);

  // Records consumption admitted at `at_micros` while `instances` were live.
  void Record(const std::vector<Admitted>& admitted, int64_t at_micros, int64_t instances);

  // Sends what is recorded to `store` as kAdd batches of at most `batch_size` items, and
  // forgets it (best effort: a failed batch is counted as dropped, not retried). A window's
  // slices go as they are (each as of its time); a token bucket's slices are replayed against
  // this instance's share and what they still owe now goes as one item
  // (algorithm/token_bucket_replay.h). The last batch to finish reports the round
  // (kReconciled). Cheap when nothing is recorded.
  void Reconcile(Store& store);

  // Items added to the store, and items dropped (at the bound, or in a failed batch).
  int64_t reconciled() const { return counters_->reconciled.load(); }
  int64_t dropped() const { return counters_->dropped.load(); }

 private:
  // Shared with the kAdd batches' callbacks, which must not keep the store alive.
  struct Counters {
    std::atomic<int64_t> reconciled{0};
    std::atomic<int64_t> dropped{0};
    ResilienceEventCallback on_event;
  };
  struct Slice {
    int64_t index = 0;      // the window or time slice
    int64_t cost = 0;       // summed
    int64_t at_micros = 0;  // the latest consumption recorded in it
  };
  // The consumption of one (limit name, key).
  struct Consumption {
    std::shared_ptr<const Limit> limit;  // a copy of the shared limit, kept for the kAdd items
    std::vector<Slice> slices;
    // The largest N the fallback answered with while recording: the share the consumption is
    // replayed against (N read at reconciliation may be a restarted Redis' partial count).
    int64_t instances = 1;
  };
  using Key = std::pair<std::string, std::string>;

  // The kAdd items of `pending` as of `now_micros`; `limits` keeps their limits alive.
  static std::vector<CheckItem> AddItems(absl::flat_hash_map<Key, Consumption>& pending,
                                         int64_t now_micros,
                                         std::vector<std::shared_ptr<const Limit>>& limits);
  static void EmitReconciled(const Counters& counters, int64_t added, int64_t dropped);

  Clock* const clock_;
  const int64_t max_entries_;
  const size_t batch_size_;
  const std::shared_ptr<Counters> counters_ = std::make_shared<Counters>();
  absl::Mutex mutex_;
  absl::flat_hash_map<Key, Consumption> pending_ ABSL_GUARDED_BY(mutex_);
  int64_t pending_entries_ ABSL_GUARDED_BY(mutex_) = 0;  // slices in pending_
  int64_t dropped_since_reconcile_ ABSL_GUARDED_BY(mutex_) = 0;
  std::atomic<bool> has_pending_{false};
};

}  // namespace tollgate::resilience

#endif  // TOLLGATE_SRC_RESILIENCE_RECONCILER_H_
