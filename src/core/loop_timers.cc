// Copyright tollgate authors. LoopTimers (tollgate/timers.h): deadlines on the event loops.
#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "boost/asio/io_context.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/steady_timer.hpp"
#include "src/core/deadline_queue.h"
#include "src/core/deadline_scheduler.h"
#include "tollgate/timers.h"

namespace tollgate {
namespace {

using internal::DeadlineQueue;
using internal::DeadlineScheduler;

// One loop's deadlines: a min-heap and one steady_timer armed for its earliest entry.
// Touched only on the loop's thread.
class LoopQueue : public std::enable_shared_from_this<LoopQueue> {
 public:
  explicit LoopQueue(boost::asio::io_context& io) : io_(io), timer_(io) {}

  boost::asio::io_context& io() { return io_; }

  void Add(int64_t due_micros, const std::atomic<bool>* cancelled,
           absl::AnyInvocable<void() &&> callback) {
    queue_.Push(due_micros, cancelled, std::move(callback));
    ArmIfEarlier();
  }

  // Runs every pending callback not cancelled now, and stops the timer.
  void Flush() {
    flushed_ = true;
    timer_.cancel();
    while (!queue_.empty()) {
      DeadlineQueue::Popped popped = queue_.Pop();
      if (!popped.cancelled) std::move(popped.callback)();
    }
  }

 private:
  // With one timeout for all calls, deadlines arrive in order: the timer is armed once per
  // earliest entry, not once per call.
  void ArmIfEarlier() {
    if (queue_.empty() || flushed_) return;
    const int64_t due = queue_.earliest_micros();
    if (armed_ && due >= armed_due_micros_) return;
    armed_ = true;
    armed_due_micros_ = due;
    timer_.expires_at(std::chrono::steady_clock::time_point(std::chrono::microseconds(due)));
    timer_.async_wait([self = shared_from_this()](const boost::system::error_code& error) {
      if (error == boost::asio::error::operation_aborted) return;  // re-armed or flushed
      self->OnTimer();
    });
  }

  void OnTimer() {
    armed_ = false;
    const int64_t now = DeadlineScheduler::MonotonicMicros();
    // Cancelled entries at the front go whatever their deadline; due ones run.
    while (!queue_.empty() && (queue_.FrontCancelled() || queue_.earliest_micros() <= now)) {
      DeadlineQueue::Popped popped = queue_.Pop();
      if (!popped.cancelled) std::move(popped.callback)();
    }
    ArmIfEarlier();
  }

  boost::asio::io_context& io_;
  boost::asio::steady_timer timer_;
  DeadlineQueue queue_;
  bool armed_ = false;
  int64_t armed_due_micros_ = 0;
  bool flushed_ = false;
};

class LoopTimersImpl final : public Timers {
 public:
  explicit LoopTimersImpl(const std::vector<boost::asio::io_context*>& loops) {
    for (boost::asio::io_context* io : loops) queues_.push_back(std::make_shared<LoopQueue>(*io));
  }

  ~LoopTimersImpl() override {
    for (const std::shared_ptr<LoopQueue>& queue : queues_) {
      if (queue->io().get_executor().running_in_this_thread()) {
        queue->Flush();
      } else {
        boost::asio::post(queue->io(), [queue] { queue->Flush(); });
      }
    }
  }

  int64_t NowMicros() const override { return DeadlineScheduler::MonotonicMicros(); }

  void RunAfter(int64_t delay_micros, const std::atomic<bool>* cancelled,
                absl::AnyInvocable<void() &&> callback) override {
    for (const std::shared_ptr<LoopQueue>& queue : queues_) {
      if (queue->io().get_executor().running_in_this_thread()) {
        queue->Add(NowMicros() + std::max<int64_t>(0, delay_micros), cancelled,
                   std::move(callback));
        return;
      }
    }
    // A caller off the loops (a library caller, a test): a thread of its own, started once.
    std::call_once(fallback_once_, [this] { fallback_ = std::make_unique<DeadlineScheduler>(); });
    fallback_->RunAfter(delay_micros, cancelled, std::move(callback));
  }

 private:
  std::vector<std::shared_ptr<LoopQueue>> queues_;
  std::once_flag fallback_once_;
  std::unique_ptr<DeadlineScheduler> fallback_;
};

}  // namespace

std::shared_ptr<Timers> LoopTimers(std::vector<boost::asio::io_context*> loops) {
  return std::make_shared<LoopTimersImpl>(loops);
}

}  // namespace tollgate
