// Copyright tollgate authors. The heap of deadlines behind every Timers implementation.
#ifndef TOLLGATE_SRC_RESILIENCE_DEADLINE_QUEUE_H_
#define TOLLGATE_SRC_RESILIENCE_DEADLINE_QUEUE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <queue>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"

namespace tollgate::resilience {

// Callbacks by deadline, the earliest first, and those due at the same microsecond in the
// order they were pushed. A callback whose `cancelled` flag (may be null) is set is dropped
// unrun by whoever pops it. Not thread-safe: its owner locks, or touches it from one thread.
class DeadlineQueue {
 public:
  struct Popped {
    int64_t due_micros = 0;
    bool cancelled = false;  // the flag was set when popped: drop `callback` unrun
    absl::AnyInvocable<void() &&> callback;
  };

  void Push(int64_t due_micros, const std::atomic<bool>* cancelled,
            absl::AnyInvocable<void() &&> callback) {
    queue_.push(Entry{due_micros, next_sequence_++, cancelled, std::move(callback)});
  }

  bool empty() const { return queue_.empty(); }
  size_t size() const { return queue_.size(); }
  // REQUIRES: !empty().
  int64_t earliest_micros() const { return queue_.top().due_micros; }
  // REQUIRES: !empty().
  bool FrontCancelled() const { return IsCancelled(queue_.top()); }

  // Removes the earliest entry. REQUIRES: !empty().
  Popped Pop() {
    const Entry& top = queue_.top();
    Popped popped{top.due_micros, IsCancelled(top), std::move(top.callback)};
    queue_.pop();
    return popped;
  }

 private:
  struct Entry {
    int64_t due_micros;
    uint64_t sequence;
    const std::atomic<bool>* cancelled;
    // Mutable: moved out of the heap's top (a const reference) just before it is popped.
    mutable absl::AnyInvocable<void() &&> callback;
    bool operator>(const Entry& other) const {
      return due_micros != other.due_micros ? due_micros > other.due_micros
                                            : sequence > other.sequence;
    }
  };

  static bool IsCancelled(const Entry& entry) {
    return entry.cancelled != nullptr && entry.cancelled->load(std::memory_order_acquire);
  }

  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue_;
  uint64_t next_sequence_ = 0;
};

}  // namespace tollgate::resilience

#endif  // TOLLGATE_SRC_RESILIENCE_DEADLINE_QUEUE_H_
