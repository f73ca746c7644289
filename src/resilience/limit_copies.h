// Copyright tollgate authors. Copies of limits that outlive the caller's: a Limit a caller
// passes lives only until its own call is answered, and what the resilient store holds for
// later (the fallback's substitutes, what is left to reconcile) needs its own.
#ifndef TOLLGATE_SRC_RESILIENCE_LIMIT_COPIES_H_
#define TOLLGATE_SRC_RESILIENCE_LIMIT_COPIES_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "tollgate/limit.h"

namespace tollgate::resilience {

// One copy per limit name, made again when its numbers change. Thread-safe.
class LimitCopies {
 public:
  // A copy of `limit` with `numbers` in place of its own: the one made before for that name
  // when its numbers are the same (whatever else of the limit changed), else a new one.
  std::shared_ptr<const Limit> Get(const Limit& limit, const LimitNumbers& numbers) {
    absl::MutexLock lock(&mutex_);
    std::shared_ptr<const Limit>& cached = copies_[limit.name];
    if (cached == nullptr || !SameNumbers(cached->numbers, numbers)) {
      auto copy = std::make_shared<Limit>(limit);
      copy->numbers = numbers;
      cached = std::move(copy);
    }
    return cached;
  }

 private:
  static bool SameNumbers(const LimitNumbers& a, const LimitNumbers& b) {
    return a.algorithm == b.algorithm && a.capacity == b.capacity &&
           a.refill_per_second == b.refill_per_second && a.limit == b.limit &&
           a.window_micros == b.window_micros;
  }

  absl::Mutex mutex_;
  absl::flat_hash_map<std::string, std::shared_ptr<const Limit>> copies_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace tollgate::resilience

#endif  // TOLLGATE_SRC_RESILIENCE_LIMIT_COPIES_H_
