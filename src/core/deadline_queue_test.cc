// Copyright tollgate authors.
#include "src/core/deadline_queue.h"

#include <atomic>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace tollgate::internal {
namespace {

TEST(DeadlineQueueTest, PopsEarliestFirstWhateverThePushOrder) {
  DeadlineQueue queue;
  std::vector<int> ran;
  // In order, then earlier ones (the heap), then in order again, and ties on both sides.
  for (int due : {10, 20, 20, 30, 5, 15, 20, 40, 1, 40, 50}) {
    queue.Push(due, nullptr, [&ran, due] { ran.push_back(due); });
  }
  EXPECT_EQ(queue.size(), 11u);
  EXPECT_EQ(queue.earliest_micros(), 1);
  std::vector<int> popped;
  while (!queue.empty()) {
    DeadlineQueue::Popped entry = queue.Pop();
    popped.push_back(static_cast<int>(entry.due_micros));
    std::move(entry.callback)();
  }
  EXPECT_EQ(popped, (std::vector<int>{1, 5, 10, 15, 20, 20, 20, 30, 40, 40, 50}));
  EXPECT_EQ(ran, popped);
}

TEST(DeadlineQueueTest, EqualDeadlinesPopInPushOrderAcrossFifoAndHeap) {
  DeadlineQueue queue;
  std::vector<int> ran;
  queue.Push(20, nullptr, [&ran] { ran.push_back(1); });  // FIFO
  queue.Push(10, nullptr, [&ran] { ran.push_back(2); });  // heap
  queue.Push(20, nullptr, [&ran] { ran.push_back(3); });  // FIFO
  queue.Push(10, nullptr, [&ran] { ran.push_back(4); });  // heap
  queue.Push(20, nullptr, [&ran] { ran.push_back(5); });  // FIFO
  while (!queue.empty()) std::move(queue.Pop().callback)();
  EXPECT_EQ(ran, (std::vector<int>{2, 4, 1, 3, 5}));
}

TEST(DeadlineQueueTest, CancelledFrontIsSeenInEitherPart) {
  DeadlineQueue queue;
  std::atomic<bool> cancelled_late{false};
  std::atomic<bool> cancelled_early{false};
  queue.Push(30, &cancelled_late, [] {});
  queue.Push(10, &cancelled_early, [] {});  // earlier: the heap
  EXPECT_FALSE(queue.FrontCancelled());
  cancelled_early.store(true);
  EXPECT_TRUE(queue.FrontCancelled());
  DeadlineQueue::Popped first = queue.Pop();
  EXPECT_EQ(first.due_micros, 10);
  EXPECT_TRUE(first.cancelled);
  EXPECT_FALSE(queue.FrontCancelled());
  cancelled_late.store(true);
  EXPECT_TRUE(queue.FrontCancelled());
  EXPECT_TRUE(queue.Pop().cancelled);
  EXPECT_TRUE(queue.empty());
}

}  // namespace
}  // namespace tollgate::internal
