// Copyright tollgate authors.
#include "src/core/spin_lock.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace tollgate::internal {
namespace {

TEST(SpinLockTest, ThreadsIncrementingUnderTheLockLoseNoUpdate) {
  SpinLock lock;
  int64_t counter = 0;  // plain, not atomic: only the lock keeps the increments whole
  constexpr int kThreads = 4;
  constexpr int kIncrements = 100'000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kIncrements; ++i) {
        SpinLockHolder hold(lock);
        // Read, then write back later: an overlapping holder would lose updates.
        const int64_t seen = counter;
        if (i % 64 == 0) std::this_thread::yield();
        counter = seen + 1;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(counter, int64_t{kThreads} * kIncrements);
}

TEST(SpinLockTest, AWaiterGetsTheLockAfterALongHoldAndSeesItsWrites) {
  // Held for longer than the waiter spins and yields: the waiter reaches its sleeping steps
  // and must still take the lock once it is released.
  SpinLock lock;
  int64_t value = 0;
  std::atomic<bool> holding{false};
  std::thread holder([&] {
    SpinLockHolder hold(lock);
    holding.store(true);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    value = 42;
  });
  while (!holding.load()) std::this_thread::yield();
  int64_t seen = 0;
  {
    SpinLockHolder hold(lock);
    seen = value;
  }
  holder.join();
  EXPECT_EQ(seen, 42);
}

TEST(SpinLockTest, TryLockFailsWhileHeldAndSucceedsWhenFree) {
  SpinLock lock;
  ASSERT_TRUE(lock.TryLock());
  std::atomic<bool> other_got_it{true};
  std::thread other([&] { other_got_it.store(lock.TryLock()); });
  other.join();
  EXPECT_FALSE(other_got_it.load());
  lock.Unlock();
  std::thread again([&] {
    other_got_it.store(lock.TryLock());
    if (other_got_it.load()) lock.Unlock();
  });
  again.join();
  EXPECT_TRUE(other_got_it.load());
}

}  // namespace
}  // namespace tollgate::internal
