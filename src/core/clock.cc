// Copyright tollgate authors.
#include "tollgate/clock.h"

#include <time.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "src/core/wall_clock.h"

namespace tollgate {
namespace internal {

bool CounterUsableFor(std::string_view clock_source, std::string_view cpu_flags) {
  if (clock_source == "tsc") return true;
  if (clock_source != "kvm-clock") return false;
  bool constant = false;
  bool nonstop = false;
  // (Debian's Abseil has its own string_view, not std's.)
  const absl::string_view flags(cpu_flags.data(), cpu_flags.size());
  for (absl::string_view flag : absl::StrSplit(flags, absl::ByAnyChar(" \t"))) {
    constant = constant || flag == "constant_tsc";
    nonstop = nonstop || flag == "nonstop_tsc";
  }
  return constant && nonstop;
}

namespace {

// 2^32: ns per tick is kept as a 32.32 fixed-point number.
constexpr double kQ32 = 4294967296.0;
// Extrapolation covers at most this many ticks (about 0.9 s at 2.4 GHz), so the fixed-point
// multiplications below cannot overflow; an older anchor is renewed anyway.
constexpr int64_t kMaxExtrapolatedTicks = int64_t{1} << 31;
// The anchor's fixed-point scale (see WallClock::kMicrosFractionBits).
constexpr double kQ36 = static_cast<double>(uint64_t{1} << WallClock::kMicrosFractionBits);

int64_t RealtimeNs() {
  // The one place production code reads the system clock.
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

bool CounterUsable() {
#if defined(__x86_64__)
  // TOLLGATE_CLOCK_COUNTER=0: every read is the kernel's, whatever the machine (see
  // wall_clock.h for what the counter costs in accuracy where a VM's counter can jump).
  if (const char* setting = std::getenv("TOLLGATE_CLOCK_COUNTER");
      setting != nullptr && std::string_view(setting) == "0") {
    return false;
  }
  std::ifstream source("/sys/devices/system/clocksource/clocksource0/current_clocksource");
  std::string clock_source;
  if (!(source >> clock_source)) return false;
  // The first processor's flags: every processor of a machine has the same.
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    const size_t colon = line.find(':');
    return CounterUsableFor(clock_source, colon == std::string::npos
                                              ? std::string_view()
                                              : std::string_view(line).substr(colon + 1));
  }
  return CounterUsableFor(clock_source, "");
#else
  return false;
#endif
}

// WallClock ids, from 1 (an anchor's owner 0 is none).
std::atomic<uint64_t> next_wall_clock_id{1};

// A (counter, wall ns) pair read together: the counter is read on both sides of the clock,
// and a pair whose sides are further apart than kMaxPairTicks (the thread was interrupted
// in between) is read again. Returns false, with the time read, if no try was narrow enough:
// such a pair must not anchor anything.
constexpr int64_t kMaxPairTicks = 8192;

struct Pair {
  int64_t tsc = 0;
  int64_t ns = 0;
};

bool ReadPair(Pair& pair) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    const int64_t before = ReadTimeStampCounter();
    pair.ns = RealtimeNs();
    const int64_t after = ReadTimeStampCounter();
    if (after >= before && after - before < kMaxPairTicks) {
      pair.tsc = before + (after - before) / 2;
      return true;
    }
  }
  return false;
}

}  // namespace

WallClock::WallClock(WallClockOptions options)
    : options_(options),
      use_counter_(options.use_counter && CounterUsable()),
      id_(next_wall_clock_id.fetch_add(1, std::memory_order_relaxed)) {}

int64_t WallClock::RenewMicros() const {
  if (!use_counter_) return RealtimeNs() / 1000;
  return Renew() / 1000;
}

int64_t WallClock::Renew() const {
  Pair pair;
  if (!ReadPair(pair)) {
    wall_clock_anchor = WallClockAnchor{};  // the next read tries again
    return pair.ns;
  }
  RenewRate(pair.tsc, pair.ns);
  // Anchor this thread at the pair with the rate as it now stands; with no rate yet, the
  // anchor is unusable and the next read renews again.
  const uint64_t q32 = ns_per_tick_q32_.load(std::memory_order_relaxed);
  WallClockAnchor next;
  if (q32 != 0 && pair.ns >= 0) {
    const double ns_per_tick = static_cast<double>(q32) / kQ32;
    const double usable = static_cast<double>(options_.anchor_ns) / ns_per_tick;
    next.owner = id_;
    next.tsc = static_cast<uint64_t>(pair.tsc);
    next.usable_ticks = usable < static_cast<double>(kMaxExtrapolatedTicks)
                            ? static_cast<uint64_t>(usable)
                            : static_cast<uint64_t>(kMaxExtrapolatedTicks);
    next.micros_per_tick_q36 = static_cast<uint64_t>(ns_per_tick / 1000 * kQ36);
    next.micros = pair.ns / 1000;
    next.fraction_q36 = static_cast<uint64_t>(static_cast<double>(pair.ns % 1000) / 1000 * kQ36);
  }
  wall_clock_anchor = next;
  return pair.ns;
}

void WallClock::RenewRate(int64_t pair_tsc, int64_t pair_ns) const {
  absl::MutexLock lock(&mu_);
  const int64_t ticks = pair_tsc - base_tsc_;
  const int64_t ns = pair_ns - base_ns_;
  if (base_ns_ == 0 || ticks <= 0 || ns <= 0) {
    // First anchor, or the clock or counter went back: measure from here.
    base_tsc_ = pair_tsc;
    base_ns_ = pair_ns;
    return;
  }
  const double measured = static_cast<double>(ns) / static_cast<double>(ticks);
  const uint64_t q32 = ns_per_tick_q32_.load(std::memory_order_relaxed);
  if (q32 != 0) {
    const double predicted = static_cast<double>(ticks) * (static_cast<double>(q32) / kQ32);
    if (std::abs(predicted - static_cast<double>(ns)) >
        static_cast<double>(options_.max_error_ns)) {
      // The wall clock was set (or the counter jumped): keep the rate, move the base.
      restarts_.fetch_add(1, std::memory_order_relaxed);
      base_tsc_ = pair_tsc;
      base_ns_ = pair_ns;
      return;
    }
  }
  // The rate is (re)measured only over a baseline long enough that the few ns of
  // uncertainty in each pair do not matter; it then improves as the baseline grows. Between
  // 0.01 and 100 ns per tick (a 10 MHz to 100 GHz counter), or it is not a counter at all.
  if (ns >= options_.first_baseline_ns && measured > 0.01 && measured < 100) {
    ns_per_tick_q32_.store(static_cast<uint64_t>(measured * kQ32), std::memory_order_relaxed);
  }
}

}  // namespace internal

Clock& SystemClock() {
  // Never destroyed: usable during shutdown.
  static internal::WallClock* clock = new internal::WallClock();
  return *clock;
}

}  // namespace tollgate
