// Copyright tollgate authors.
#include "tollgate/clock.h"

#include <time.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace tollgate {
namespace {

// How far SystemClock() may be from the kernel's CLOCK_REALTIME, or go back on one thread,
// for these tests. Generous on purpose: Abseil's extrapolation is far closer than this, and a
// test must not fail on a busy machine; a clock in the wrong unit, from the wrong epoch
// (a monotonic clock) or stuck is off by far more.
constexpr int64_t kSlackMicros = 50'000;

int64_t KernelMicros() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<int64_t>(now.tv_sec) * 1'000'000 + now.tv_nsec / 1000;
}

// Reads SystemClock() `reads` times, each between two reads of the kernel's wall clock, and
// counts the reads outside [before - kSlackMicros, after + kSlackMicros]. Being descheduled
// between the reads only widens the bracket.
int64_t ReadsOutsideTheKernelsBracket(int64_t reads) {
  const Clock& clock = SystemClock();
  int64_t outside = 0;
  for (int64_t i = 0; i < reads; ++i) {
    const int64_t before = KernelMicros();
    const int64_t now = clock.NowMicros();
    const int64_t after = KernelMicros();
    if (now < before - kSlackMicros || now > after + kSlackMicros) ++outside;
  }
  return outside;
}

TEST(SystemClockTest, ReadsTheKernelsRealtimeClock) {
  EXPECT_EQ(ReadsOutsideTheKernelsBracket(100'000), 0);
}

TEST(SystemClockTest, ReadsTheKernelsRealtimeClockOnManyThreads) {
  std::atomic<int64_t> outside{0};
  std::vector<std::thread> threads;
  threads.reserve(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] { outside.fetch_add(ReadsOutsideTheKernelsBracket(20'000)); });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(outside.load(), 0);
}

// Monotonic enough for limits: on one thread a read is never far behind the one before, and
// the clock moves on as the kernel's does.
TEST(SystemClockTest, MovesForwardWithTheKernelsClock) {
  const Clock& clock = SystemClock();
  const int64_t first = clock.NowMicros();
  const int64_t kernel_start = KernelMicros();
  int64_t previous = first;
  int64_t went_back = 0;
  while (KernelMicros() - kernel_start < 5'000) {
    const int64_t now = clock.NowMicros();
    if (now < previous - kSlackMicros) ++went_back;
    if (now > previous) previous = now;
  }
  EXPECT_EQ(went_back, 0);
  EXPECT_GT(clock.NowMicros(), first);
}

TEST(SimulatedClockTest, MovesOnlyWhenTold) {
  SimulatedClock clock(1'000);
  EXPECT_EQ(clock.NowMicros(), 1'000);
  clock.AdvanceMillis(2);
  EXPECT_EQ(clock.NowMicros(), 3'000);
  clock.SetMicros(10);
  EXPECT_EQ(clock.NowMicros(), 10);
}

}  // namespace
}  // namespace tollgate
