// Copyright tollgate authors.
#include "tollgate/clock.h"

#include <stdlib.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "src/core/wall_clock.h"

namespace tollgate {
namespace {

int64_t KernelMicros() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<int64_t>(now.tv_sec) * 1'000'000 + now.tv_nsec / 1000;
}

// Reads `clock` between two reads of the kernel's wall clock, for at least `min_reads` reads
// and until `min_micros` have passed (so the counter's rate gets measured and used), and
// counts the reads outside [before - slack, after + slack]. Being descheduled between the
// reads only widens the bracket, so a busy machine cannot make this fail.
int64_t ReadsOutsideTheBracket(const Clock& clock, int64_t min_reads, int64_t min_micros,
                               int64_t slack_micros) {
  int64_t outside = 0;
  const int64_t start = KernelMicros();
  for (int64_t i = 0; i < min_reads || KernelMicros() - start < min_micros; ++i) {
    const int64_t before = KernelMicros();
    const int64_t now = clock.NowMicros();
    const int64_t after = KernelMicros();
    if (now < before - slack_micros || now > after + slack_micros) ++outside;
  }
  return outside;
}

internal::WallClockOptions QuickOptions() {
  internal::WallClockOptions options;
  options.first_baseline_ns = 2'000'000;  // measure the rate after 2 ms, not 20
  return options;
}

// The counter-based clock is the system clock, read cheaply: every read falls inside the
// kernel's own reads around it, give or take a few microseconds of extrapolation error.
TEST(WallClockTest, AgreesWithTheKernelClock) {
  internal::WallClock clock(QuickOptions());
  EXPECT_EQ(ReadsOutsideTheBracket(clock, 200'000, 50'000, 10), 0);
  EXPECT_EQ(clock.restarts(), 0);
}

TEST(WallClockTest, AgreesWithTheKernelClockOnManyThreads) {
  internal::WallClock clock(QuickOptions());
  std::atomic<int64_t> outside{0};
  std::vector<std::thread> threads;
  threads.reserve(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back(
        [&] { outside.fetch_add(ReadsOutsideTheBracket(clock, 50'000, 20'000, 10)); });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(outside.load(), 0);
}

// A thread keeps one anchor, owned by the clock that set it: reading two clocks in turn
// renews it on every switch, and each clock still reads the kernel's time.
TEST(WallClockTest, TwoClocksReadInTurnOnOneThreadBothAgree) {
  internal::WallClock first(QuickOptions());
  internal::WallClock second(QuickOptions());
  int64_t outside = 0;
  const int64_t start = KernelMicros();
  for (int64_t i = 0; i < 20'000 || KernelMicros() - start < 30'000; ++i) {
    for (const internal::WallClock* clock : {&first, &second}) {
      const int64_t before = KernelMicros();
      const int64_t now = clock->NowMicros();
      const int64_t after = KernelMicros();
      if (now < before - 10 || now > after + 10) ++outside;
    }
  }
  EXPECT_EQ(outside, 0);
}

// A clock made where a destroyed one was (at its address) does not extrapolate from the
// anchor that one left on this thread: here, one that must not use the counter at all.
// Anchors name their clock by its id, which is new for every clock. (Reads from a stale
// anchor are off by less than a microsecond, so the brackets catch them only in some
// rounds; the ids tell every time.)
TEST(WallClockTest, AClockInADestroyedClocksPlaceStartsAfresh) {
  internal::WallClockOptions kernel_only;
  kernel_only.use_counter = false;
  std::optional<internal::WallClock> clock;
  int64_t outside = 0;
  for (int round = 0; round < 16; ++round) {
    clock.emplace(QuickOptions());
    const uint64_t destroyed_id = clock->id();
    // Long enough for the rate to be measured and this thread anchored (where the counter
    // is used at all).
    EXPECT_EQ(ReadsOutsideTheBracket(*clock, 1'000, 3'000, 10), 0);
    clock.emplace(kernel_only);
    EXPECT_NE(clock->id(), destroyed_id);
    EXPECT_NE(clock->id(), 0u);
    outside += ReadsOutsideTheBracket(*clock, 5'000, 0, 0);
  }
  EXPECT_EQ(outside, 0);
}

TEST(WallClockTest, WithoutTheCounterEveryReadIsTheKernelClock) {
  internal::WallClockOptions options;
  options.use_counter = false;
  internal::WallClock clock(options);
  EXPECT_FALSE(clock.uses_counter());
  EXPECT_EQ(ReadsOutsideTheBracket(clock, 10'000, 0, 0), 0);
}

// The counter stands in for the kernel's clock where the kernel's clock is that counter:
// clock source "tsc", or a KVM guest's kvm-clock over an invariant counter.
TEST(WallClockTest, UsesTheCounterOnlyWhereTheKernelClockIsTheCounter) {
  const std::string_view invariant = " fpu tsc constant_tsc rep_good nonstop_tsc cpuid";
  EXPECT_TRUE(internal::CounterUsableFor("tsc", ""));
  EXPECT_TRUE(internal::CounterUsableFor("kvm-clock", invariant));
  EXPECT_TRUE(internal::CounterUsableFor("kvm-clock", "\tconstant_tsc\tnonstop_tsc"));
  // A counter whose rate follows the CPU's frequency, or that stops in deep sleep.
  EXPECT_FALSE(internal::CounterUsableFor("kvm-clock", " fpu tsc constant_tsc rep_good"));
  EXPECT_FALSE(internal::CounterUsableFor("kvm-clock", " fpu tsc nonstop_tsc"));
  // Whole flags only.
  EXPECT_FALSE(internal::CounterUsableFor("kvm-clock", " constant_tsc_x nonstop_tscx"));
  EXPECT_FALSE(internal::CounterUsableFor("kvm-clock", ""));
  // Clock sources that are not the counter, whatever the CPU.
  EXPECT_FALSE(internal::CounterUsableFor("hpet", invariant));
  EXPECT_FALSE(internal::CounterUsableFor("acpi_pm", invariant));
  EXPECT_FALSE(internal::CounterUsableFor("xen", invariant));
  EXPECT_FALSE(internal::CounterUsableFor("", invariant));
}

// TOLLGATE_CLOCK_COUNTER=0 turns the counter off, wherever it would be used.
TEST(WallClockTest, TheEnvironmentCanTurnTheCounterOff) {
  ASSERT_EQ(setenv("TOLLGATE_CLOCK_COUNTER", "0", 1), 0);
  const internal::WallClock clock;
  ASSERT_EQ(unsetenv("TOLLGATE_CLOCK_COUNTER"), 0);
  EXPECT_FALSE(clock.uses_counter());
  EXPECT_EQ(ReadsOutsideTheBracket(clock, 10'000, 0, 0), 0);
}

TEST(WallClockTest, SystemClockIsTheWallClock) {
  EXPECT_EQ(ReadsOutsideTheBracket(SystemClock(), 10'000, 0, 10), 0);
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
