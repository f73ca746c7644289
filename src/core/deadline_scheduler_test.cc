// Copyright tollgate authors.
#include "src/core/deadline_scheduler.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace tollgate::internal {
namespace {

// Notifies when destroyed: tells when the scheduler let go of a callback that owns it.
struct DestructionSignal {
  absl::Notification* destroyed;
  ~DestructionSignal() { destroyed->Notify(); }
};

TEST(DeadlineSchedulerTest, CancelledCallbackIsDroppedUnrunAndTheOthersStillRun) {
  std::atomic<bool> cancelled{false};
  std::atomic<bool> cancelled_ran{false};
  std::vector<int> order;
  std::mutex mutex;
  absl::Notification last_ran;
  std::atomic<bool> not_cancelled{false};
  std::atomic<bool> cancelled_later{true};
  {
    DeadlineScheduler scheduler;
    scheduler.RunAfter(1'000, &cancelled, [&] { cancelled_ran = true; });
    cancelled = true;  // the store answered first
    scheduler.RunAfter(2'000, &not_cancelled, [&] {
      std::lock_guard<std::mutex> lock(mutex);
      order.push_back(1);
    });
    scheduler.RunAfter(3'000, nullptr, [&] {
      std::lock_guard<std::mutex> lock(mutex);
      order.push_back(2);
      last_ran.Notify();
    });
    last_ran.WaitForNotification();
    // Far away and cancelled: neither run at its deadline nor at destruction.
    scheduler.RunAfter(60'000'000, &cancelled_later, [&] { cancelled_ran = true; });
  }
  EXPECT_FALSE(cancelled_ran);
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

TEST(DeadlineSchedulerTest, CancelledCallbackIsReleasedLongBeforeItsDeadline) {
  DeadlineScheduler scheduler;
  absl::Notification destroyed;
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  // An hour away; the callback owns its flag, as a pending call does.
  scheduler.RunAfter(3'600'000'000, cancelled.get(),
                     [cancelled, signal = std::shared_ptr<DestructionSignal>(
                                     new DestructionSignal{&destroyed})] {});
  *cancelled = true;
  cancelled.reset();
  // Something due now wakes the thread; the cancelled callback in front is then let go.
  absl::Notification ran;
  scheduler.RunAfter(0, nullptr, [&] { ran.Notify(); });
  ran.WaitForNotification();
  EXPECT_TRUE(destroyed.WaitForNotificationWithTimeout(absl::Seconds(60)));
}

TEST(DeadlineSchedulerTest, UncancelledCallbackRunsAtItsDeadline) {
  DeadlineScheduler scheduler;
  std::atomic<bool> cancelled{false};
  absl::Notification ran;
  const int64_t start = DeadlineScheduler::MonotonicMicros();
  scheduler.RunAfter(5'000, &cancelled, [&] { ran.Notify(); });
  ran.WaitForNotification();
  EXPECT_GE(DeadlineScheduler::MonotonicMicros() - start, 5'000);
}

}  // namespace
}  // namespace tollgate::internal
