// Copyright tollgate authors. The queue of deadlines behind every Timers implementation.
#ifndef TOLLGATE_SRC_CORE_DEADLINE_QUEUE_H_
#define TOLLGATE_SRC_CORE_DEADLINE_QUEUE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <queue>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"

namespace tollgate::internal {

// Callbacks by deadline, the earliest first, and those due at the same microsecond in the
// order they were pushed. A callback whose `cancelled` flag (may be null) is set is dropped
// unrun by whoever pops it. Deadlines pushed in order (every call of a limit waits the same
// timeout) queue in a FIFO, pushed and popped in constant time; one earlier than the FIFO's
// last goes to a heap. Not thread-safe: its owner locks, or touches it from one thread.
class DeadlineQueue {
 public:
  struct Popped {
    int64_t due_micros = 0;
    bool cancelled = false;  // the flag was set when popped: drop `callback` unrun
    absl::AnyInvocable<void() &&> callback;
  };

  void Push(int64_t due_micros, const std::atomic<bool>* cancelled,
            absl::AnyInvocable<void() &&> callback) {
    Entry entry{due_micros, next_sequence_++, cancelled, std::move(callback)};
    if (in_order_.empty() || due_micros >= in_order_.back().due_micros) {
      in_order_.push_back(std::move(entry));
    } else {
      out_of_order_.push(std::move(entry));
    }
  }

  bool empty() const { return in_order_.empty() && out_of_order_.empty(); }
  size_t size() const { return in_order_.size() + out_of_order_.size(); }
  // REQUIRES: !empty().
  int64_t earliest_micros() const { return Front().due_micros; }
  // REQUIRES: !empty().
  bool FrontCancelled() const { return IsCancelled(Front()); }

  // Removes the earliest entry. REQUIRES: !empty().
  Popped Pop() {
    if (FrontIsInOrder()) {
      Entry& front = in_order_.front();
      Popped popped{front.due_micros, IsCancelled(front), std::move(front.callback)};
      in_order_.pop_front();
      return popped;
    }
    const Entry& top = out_of_order_.top();
    Popped popped{top.due_micros, IsCancelled(top), std::move(top.callback)};
    out_of_order_.pop();
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

  // REQUIRES: !empty().
  bool FrontIsInOrder() const {
    return out_of_order_.empty() || (!in_order_.empty() && out_of_order_.top() > in_order_.front());
  }
  const Entry& Front() const { return FrontIsInOrder() ? in_order_.front() : out_of_order_.top(); }

  std::deque<Entry> in_order_;  // by (due_micros, sequence), as pushed
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> out_of_order_;
  uint64_t next_sequence_ = 0;
};

}  // namespace tollgate::internal

#endif  // TOLLGATE_SRC_CORE_DEADLINE_QUEUE_H_
