// Copyright tollgate authors. In-memory decisions per second.
//
//   cmake -S . -B build-rel -G Ninja -DCMAKE_BUILD_TYPE=Release -DTOLLGATE_BUILD_TESTS=OFF
//   cmake --build build-rel --target memory_bench && build-rel/bench/memory_bench
//
// The floors (issue 24), through `Limiter::Check`: one hot key >= 10 million decisions/s on
// one thread (BM_LimiterHotKey/0/real_time/threads:1) and 1,000,000 distinct keys >= 3
// million/s on two threads (BM_LimiterDistinctKeys/0/.../threads:2). `items_per_second` is
// decisions per second. Time comes from the system clock, as in production: every decision
// reads it once. BM_SystemClock, BM_ClockAndLockFloor and BM_TokenBucketCheckOnly show what
// any store pays per decision before hashing and lookup; BM_DependentMiss what a key not in
// the caches waits for. Each path is measured twice in one run, so their ratio means
// something on a busy machine: the memory store's `CheckOne` (the single-item path) against
// `ApplyAsync` with a one-item vector (the batch path), and `Limiter::Check` against
// `Limiter::CheckAll`.
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "bench/bench_options.h"
#include "benchmark/benchmark.h"
#include "src/algorithm/token_bucket.h"
#include "src/store/memory/memory_store_impl.h"
#include "tollgate/clock.h"
#include "tollgate/limit.h"
#include "tollgate/limiter.h"
#include "tollgate/memory_store.h"

namespace tollgate {
namespace {

using memory::MemoryStoreImpl;
using memory::PreparedLimit;

constexpr int64_t kDistinctKeys = 1'000'000;

// Limits that neither run dry nor fill up (expire) during a run, so every decision
// consumes and writes the state of a live entry (a refusal would write nothing).
Limit BenchLimit(Algorithm algorithm) {
  Limit limit;
  limit.numbers.algorithm = algorithm;
  switch (algorithm) {
    case Algorithm::kTokenBucket:
      limit.name = "bench_token_bucket";
      limit.numbers.capacity = 1'000'000'000;
      // The slowest refill ValidateLimit accepts (full again within 365 days): a hot key is
      // never refused. A key Prefill() spent kPrefillTokens of is full again (and expires)
      // only after 36 days, so the 1M-key rows decide on live entries.
      limit.numbers.refill_per_second = 32;
      break;
    case Algorithm::kFixedWindow:
      limit.name = "bench_fixed_window";
      limit.numbers.limit = 1'000'000'000'000;  // ValidateLimit's largest
      limit.numbers.window_micros = 3'600'000'000;
      break;
    case Algorithm::kSlidingWindow:
      limit.name = "bench_sliding_window";
      limit.numbers.limit = 1'000'000'000'000;
      limit.numbers.window_micros = 3'600'000'000;
      break;
    case Algorithm::kConcurrency:  // not a rate: the memory store keeps no leases
      break;
  }
  return limit;
}

const Limit& LimitFor(int64_t algorithm_index) {
  static const auto* limits = new std::vector<Limit>{BenchLimit(Algorithm::kTokenBucket),
                                                     BenchLimit(Algorithm::kFixedWindow),
                                                     BenchLimit(Algorithm::kSlidingWindow)};
  return (*limits)[algorithm_index];
}

// The store of the hot-key rows and the two-limit row; room for every distinct key of two
// algorithms, so the two-limit row measures lookups and updates, not evictions.
MemoryStoreImpl& SharedStore() {
  static MemoryStoreImpl* store =
      MemoryStoreImpl::Create({.max_keys = 4 * kDistinctKeys}).value().release();
  return *store;
}

// One store per algorithm for the 1M-key rows: each such row's table holds that row's 1M
// keys and no others. (In one store for all three, the sliding window's row ran on a table
// of 3M keys, 512 MiB, twice the pages of the token bucket's.)
MemoryStoreImpl& KeysStore(int64_t algorithm_index) {
  static MemoryStoreImpl* stores[3] = {
      MemoryStoreImpl::Create({.max_keys = 2 * kDistinctKeys}).value().release(),
      MemoryStoreImpl::Create({.max_keys = 2 * kDistinctKeys}).value().release(),
      MemoryStoreImpl::Create({.max_keys = 2 * kDistinctKeys}).value().release()};
  return *stores[algorithm_index];
}

std::string DistinctKey(int64_t index) { return absl::StrCat("user:", index); }

// Visits the keys in a scattered order (a stride coprime with the key count), each thread
// from its own starting point, so consecutive checks rarely touch the same cache lines.
// Keys are formatted per check, as a server builds them from each request.
class KeyCursor {
 public:
  explicit KeyCursor(int thread_index)
      : next_((static_cast<int64_t>(thread_index) * 7'919) % kDistinctKeys) {}
  std::string Next() {
    std::string key = DistinctKey(next_);
    next_ += 611'953;  // prime, so the walk covers every key
    if (next_ >= kDistinctKeys) next_ -= kDistinctKeys;
    return key;
  }

 private:
  int64_t next_;
};

// What Prefill() spends of a token bucket's key: 100M of its 1G tokens, refilled at 32 a
// second, keep the key below full (alive) for 36 days.
constexpr int64_t kPrefillTokens = 100'000'000;

// Checks every distinct key of `limit` once in `store`, before the first timed run that
// uses them: the timed loop then measures decisions on existing keys, not a million first
// inserts, whichever rows a filter selects. (The other thread of a two-thread run waits at
// the loop's start barrier meanwhile.)
void Prefill(MemoryStoreImpl& store, const Limit& limit) {
  static absl::Mutex mu;
  static auto* done = new std::set<std::pair<const MemoryStoreImpl*, const Limit*>>();
  absl::MutexLock lock(&mu);
  if (!done->insert({&store, &limit}).second) return;
  for (int64_t i = 0; i < kDistinctKeys; ++i) {
    const int64_t cost = limit.numbers.algorithm == Algorithm::kTokenBucket ? kPrefillTokens : 1;
    store.ApplyAsync({CheckItem{&limit, DistinctKey(i), cost}}, [](auto) {});
  }
}

// `per_iteration`: decisions per loop iteration (a batch's size).
void Record(benchmark::State& state, int64_t allowed, int64_t per_iteration = 1) {
  const int64_t decisions = state.iterations() * per_iteration;
  state.SetItemsProcessed(decisions);
  state.counters["allowed_fraction"] =
      benchmark::Counter(static_cast<double>(allowed) / static_cast<double>(decisions),
                         benchmark::Counter::kAvgThreads);
}

// `iterations` x kIntegerOpsPerIteration simple integer operations: 8 independent chains of
// shift-and-add, bound by how many operations the core retires per cycle, not by a latency.
constexpr int64_t kIntegerOpsPerIteration = 1024;  // 8 chains x 64 steps x 2 operations
uint64_t IntegerOps(int64_t iterations) {
  uint64_t a = 1, b = 2, c = 3, d = 4, e = 5, f = 6, g = 7, h = 8;
  for (int64_t i = 0; i < iterations; ++i) {
    for (int step = 0; step < 64; ++step) {
      a += a >> 7, b += b >> 7, c += c >> 7, d += d >> 7;
      e += e >> 7, f += f >> 7, g += g >> 7, h += h >> 7;
      // Each chain stays one register: nothing to vectorize, fold or keep in memory.
      asm("" : "+r"(a), "+r"(b), "+r"(c), "+r"(d), "+r"(e), "+r"(f), "+r"(g), "+r"(h));
    }
  }
  return a ^ b ^ c ^ d ^ e ^ f ^ g ^ h;
}

// Checks `limit` (a Limit or a PreparedLimit) for next_key() once per iteration. Inlined
// into each row, so each row's loop is its own function (bench/callgrind_check.sh counts
// the CheckOne calls of one row's function).
template <typename AnyLimit, typename NextKey>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void CheckOneLoop(benchmark::State& state,
                                                      MemoryStoreImpl& store, const AnyLimit& limit,
                                                      NextKey next_key) {
  int64_t allowed = 0;
  for (auto _ : state) {
    absl::StatusOr<Decision> decision = store.CheckOne(limit, next_key(), 1);
    allowed += decision.ok() && decision->allowed;
  }
  Record(state, allowed);
}

// Checks `items` through CheckEach once per iteration, after next_keys(items) has set the
// iteration's keys (or left them as they are).
template <typename NextKeys>
void CheckEachLoop(benchmark::State& state, MemoryStoreImpl& store, std::vector<CheckItem>& items,
                   NextKeys next_keys) {
  std::vector<absl::StatusOr<Decision>> decisions(items.size());
  int64_t allowed = 0;
  for (auto _ : state) {
    next_keys(items);
    store.CheckEach(items, absl::MakeSpan(decisions));
    for (const absl::StatusOr<Decision>& decision : decisions) {
      allowed += decision.ok() && decision->allowed;
    }
  }
  Record(state, allowed, static_cast<int64_t>(items.size()));
}

std::string_view HotKey() { return "hot"; }

// The registration of the rows a goal is judged on: every algorithm, one and two threads,
// each run bench::GoalRepetitions() times (`min_time` seconds each), the median reported.
void GoalRows(benchmark::internal::Benchmark* rows, double min_time) {
  rows->DenseRange(0, 2)
      ->Threads(1)
      ->Threads(2)
      ->UseRealTime()
      ->MinTime(bench::MinTimeSeconds(min_time))
      ->Repetitions(bench::GoalRepetitions())
      ->ReportAggregatesOnly(true);
}
void HotKeyGoalRows(benchmark::internal::Benchmark* rows) { GoalRows(rows, 0.3); }
void DistinctKeysGoalRows(benchmark::internal::Benchmark* rows) { GoalRows(rows, 0.5); }

// range(0): 0 token bucket, 1 fixed window, 2 sliding window.
void BM_MemoryStoreCheckOneHotKey(benchmark::State& state) {
  CheckOneLoop(state, SharedStore(), LimitFor(state.range(0)), HotKey);
}
BENCHMARK(BM_MemoryStoreCheckOneHotKey)->Apply(HotKeyGoalRows);

// The same through a PreparedLimit (MemoryStoreImpl::Prepare): the name hashed, the numbers
// checked and the token bucket's durations computed once, not on every check.
// LimitFor(algorithm_index), prepared for SharedStore() (the only store it is valid with).
const PreparedLimit& PreparedFor(int64_t algorithm_index) {
  static const auto* prepared = [] {
    MemoryStoreImpl& store = SharedStore();
    return new std::vector<PreparedLimit>{store.Prepare(LimitFor(0)).value(),
                                          store.Prepare(LimitFor(1)).value(),
                                          store.Prepare(LimitFor(2)).value()};
  }();
  return (*prepared)[algorithm_index];
}

void BM_MemoryStoreCheckOnePreparedHotKey(benchmark::State& state) {
  CheckOneLoop(state, SharedStore(), PreparedFor(state.range(0)), HotKey);
}
BENCHMARK(BM_MemoryStoreCheckOnePreparedHotKey)->Apply(HotKeyGoalRows);

// The same on a simulated clock (one atomic load instead of a system clock read): what the
// store itself costs per decision.
void BM_MemoryStoreCheckOneHotKeyNoClock(benchmark::State& state) {
  static SimulatedClock* clock = new SimulatedClock();
  static MemoryStoreImpl* store = MemoryStoreImpl::Create({.clock = clock}).value().release();
  CheckOneLoop(state, *store, LimitFor(state.range(0)), HotKey);
}
BENCHMARK(BM_MemoryStoreCheckOneHotKeyNoClock)->DenseRange(0, 2)->Threads(1)->UseRealTime();

// The hot-key CheckOne rows again, in rounds of a few milliseconds: each round checks each
// algorithm in turn and then runs IntegerOps, so every round's checks are timed beside what
// the core could retire in that same moment. On the development VM the core's throughput
// moves by up to 1.8x from one minute (or second) to the next, and every row's time with it;
// a check's time in units of that throughput moves less (1.25x; BENCHMARKS.md). Counters:
//   tb_ops / fw_ops / sw_ops (token bucket, fixed window, sliding window): how many
//     IntegerOps the core retires in one check's time, the median over all rounds: what a
//     check costs, less at the mercy of the machine's speed than a time;
//   core_ops_per_ns: the core's IntegerOps throughput during the run (median over rounds).
// A check's decisions per second at a given core speed are core_ops_per_ns x 1e9 / <alg>_ops.
// items_per_second counts every algorithm's checks over all rounds. range(0): 0 checks by
// Limit, 1 through a PreparedLimit.
void BM_MemoryStoreCheckOneHotKeyPaired(benchmark::State& state) {
  constexpr int kChecksPerRound = 20'000;  // per algorithm
  constexpr int64_t kOpsIterationsPerRound = 2'000;
  constexpr int kAlgorithms = 3;
  MemoryStoreImpl& store = SharedStore();
  const bool prepared = state.range(0) == 1;
  int64_t allowed = 0;
  std::vector<double> ops_per_check[kAlgorithms];
  std::vector<double> ops_per_ns;
  const auto elapsed_ns = [](auto from) {
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - from)
        .count();
  };
  for (auto _ : state) {
    double check_ns[kAlgorithms];
    for (int a = 0; a < kAlgorithms; ++a) {
      const Limit& limit = LimitFor(a);
      const PreparedLimit& prepared_limit = PreparedFor(a);
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < kChecksPerRound; ++i) {
        absl::StatusOr<Decision> decision =
            prepared ? store.CheckOne(prepared_limit, "hot", 1) : store.CheckOne(limit, "hot", 1);
        allowed += decision.ok() && decision->allowed;
      }
      check_ns[a] = elapsed_ns(start);
    }
    const auto start = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(IntegerOps(kOpsIterationsPerRound));
    const double core =
        static_cast<double>(kOpsIterationsPerRound * kIntegerOpsPerIteration) / elapsed_ns(start);
    ops_per_ns.push_back(core);
    for (int a = 0; a < kAlgorithms; ++a) {
      ops_per_check[a].push_back(check_ns[a] / kChecksPerRound * core);
    }
    state.SetIterationTime((check_ns[0] + check_ns[1] + check_ns[2]) / 1e9);
  }
  Record(state, allowed, int64_t{kChecksPerRound} * kAlgorithms);
  const auto median = [](std::vector<double>& v) {
    if (v.empty()) return 0.0;
    std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  state.counters["tb_ops"] = median(ops_per_check[0]);
  state.counters["fw_ops"] = median(ops_per_check[1]);
  state.counters["sw_ops"] = median(ops_per_check[2]);
  state.counters["core_ops_per_ns"] = median(ops_per_ns);
}
BENCHMARK(BM_MemoryStoreCheckOneHotKeyPaired)
    ->DenseRange(0, 1)
    ->UseManualTime()
    ->MinTime(bench::MinTimeSeconds(3.0));

// Through the batch API: a one-item vector in, a vector of decisions out, a callback.
void BM_MemoryStoreHotKey(benchmark::State& state) {
  MemoryStoreImpl& store = SharedStore();
  const Limit& limit = LimitFor(state.range(0));
  int64_t allowed = 0;
  for (auto _ : state) {
    store.ApplyAsync({CheckItem{&limit, "hot", 1}},
                     [&allowed](absl::StatusOr<std::vector<Decision>> decisions) {
                       allowed += decisions.ok() && decisions->front().allowed;
                     });
  }
  Record(state, allowed);
}
BENCHMARK(BM_MemoryStoreHotKey)->Arg(0)->Threads(1)->Threads(2)->UseRealTime();

void BM_MemoryStoreCheckOneDistinctKeys(benchmark::State& state) {
  MemoryStoreImpl& store = KeysStore(state.range(0));
  const Limit& limit = LimitFor(state.range(0));
  Prefill(store, limit);
  KeyCursor cursor(state.thread_index());
  CheckOneLoop(state, store, limit, [&cursor] { return cursor.Next(); });
}
BENCHMARK(BM_MemoryStoreCheckOneDistinctKeys)->Apply(DistinctKeysGoalRows);

// The same decisions through MemoryStoreImpl::CheckEach, `range(1)` independent checks per call
// (the requests an event loop found ready together): the batch's entries are fetched before
// the first is decided, so their cache misses overlap. One item per decision, as above.
void BM_MemoryStoreCheckEachDistinctKeys(benchmark::State& state) {
  MemoryStoreImpl& store = KeysStore(state.range(0));
  const Limit& limit = LimitFor(state.range(0));
  Prefill(store, limit);
  KeyCursor cursor(state.thread_index());
  std::vector<CheckItem> items(static_cast<size_t>(state.range(1)), CheckItem{&limit, "", 1});
  CheckEachLoop(state, store, items, [&cursor](std::vector<CheckItem>& batch) {
    for (CheckItem& item : batch) item.key = cursor.Next();
  });
}
BENCHMARK(BM_MemoryStoreCheckEachDistinctKeys)
    ->ArgsProduct({{0, 1, 2}, {16}})
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime()
    ->MinTime(bench::MinTimeSeconds(2.0));

// One hot key through MemoryStoreImpl::CheckEach, `range(1)` checks per call (a server whose
// event loop found that many requests for one user ready together). Each is decided as
// CheckOne would, but the clock is read once per call's group of 16, not once per check.
void BM_MemoryStoreCheckEachHotKey(benchmark::State& state) {
  std::vector<CheckItem> items(static_cast<size_t>(state.range(1)),
                               CheckItem{&LimitFor(state.range(0)), "hot", 1});
  CheckEachLoop(state, SharedStore(), items, [](std::vector<CheckItem>&) {});
}
BENCHMARK(BM_MemoryStoreCheckEachHotKey)
    ->ArgsProduct({{0, 1, 2}, {16}})
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

void BM_MemoryStoreDistinctKeys(benchmark::State& state) {
  MemoryStoreImpl& store = KeysStore(state.range(0));
  const Limit& limit = LimitFor(state.range(0));
  Prefill(store, limit);
  KeyCursor cursor(state.thread_index());
  int64_t allowed = 0;
  for (auto _ : state) {
    store.ApplyAsync({CheckItem{&limit, cursor.Next(), 1}},
                     [&allowed](absl::StatusOr<std::vector<Decision>> decisions) {
                       allowed += decisions.ok() && decisions->front().allowed;
                     });
  }
  Record(state, allowed);
}
BENCHMARK(BM_MemoryStoreDistinctKeys)
    ->Arg(0)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime()
    ->MinTime(bench::MinTimeSeconds(2.0));

// The pure algorithm step alone: the ceiling for any store.
void BM_TokenBucketCheckOnly(benchmark::State& state) {
  const algorithm::TokenBucketParams params{int64_t{1} << 40, 1e12};
  std::optional<algorithm::TokenBucketState> bucket;
  int64_t now = SystemClock().NowMicros();
  for (auto _ : state) {
    algorithm::Outcome<algorithm::TokenBucketState> out =
        algorithm::TokenBucketCheck(bucket, ++now, params, 1);
    bucket = out.state;
    benchmark::DoNotOptimize(out.decision);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TokenBucketCheckOnly);

// Reading the system clock, which every decision does once.
void BM_SystemClock(benchmark::State& state) {
  Clock& clock = SystemClock();
  for (auto _ : state) benchmark::DoNotOptimize(clock.NowMicros());
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_SystemClock);

// The least an exact decision under a lock can cost: read the system clock, take a shard's
// lock (an absl::Mutex, as the memory store's), update one number from the time, release. A hot-key
// check does this plus hashing, lookup and the algorithm; this row says how much of its time no
// store could save on this machine.
void BM_ClockAndLockFloor(benchmark::State& state) {
  Clock& clock = SystemClock();
  absl::Mutex lock;
  int64_t latest = 0;
  for (auto _ : state) {
    const int64_t now = clock.NowMicros();
    absl::MutexLock holder(&lock);
    latest = now > latest ? now : latest + 1;
    benchmark::DoNotOptimize(latest);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ClockAndLockFloor);

// How many simple integer operations this core retires per nanosecond right now: 8
// independent chains of shift-and-add, 1,024 operations an iteration (`items_per_second` is
// operations per second), bound by the core's throughput, not by a latency as the floors
// above are. On the development VM this row moved by 1.5x between runs minutes apart while
// the clock read and the miss to memory held still (BENCHMARKS.md): what the core can
// retire moves from minute to minute, whatever the code it runs.
void BM_IntegerThroughput(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(IntegerOps(1));
  state.SetItemsProcessed(state.iterations() * kIntegerOpsPerIteration);
}
BENCHMARK(BM_IntegerThroughput);

// One cache miss to memory, as a check of a key not in the caches waits for: a chase of
// dependent pointers in random order through 256 MiB (huge pages requested, as the store's
// table does). `items_per_second` is misses per second; one thread's CheckOne on 1M keys,
// which waits for about one such miss per check, cannot be faster.
void BM_DependentMiss(benchmark::State& state) {
  constexpr size_t kBytes = size_t{256} << 20;
  constexpr size_t kLines = kBytes / 64;
  static char* memory = [] {
    auto* lines = static_cast<char*>(std::aligned_alloc(size_t{2} << 20, kBytes));
    madvise(lines, kBytes, MADV_HUGEPAGE);
    std::vector<uint32_t> order(kLines);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(1));
    for (size_t i = 0; i < kLines; ++i) {
      char* next = lines + size_t{order[(i + 1) % kLines]} * 64;
      std::memcpy(lines + size_t{order[i]} * 64, &next, sizeof(next));
    }
    return lines;
  }();
  char* at = memory;
  for (auto _ : state) {
    std::memcpy(&at, at, sizeof(at));
    benchmark::DoNotOptimize(at);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DependentMiss);

// A request that checks two limits at once, all or nothing (two shards locked together).
void BM_MemoryStoreTwoLimits(benchmark::State& state) {
  MemoryStoreImpl& store = SharedStore();
  const Limit& bucket = LimitFor(0);
  const Limit& window = LimitFor(2);
  Prefill(store, bucket);
  Prefill(store, window);
  KeyCursor cursor(state.thread_index());
  int64_t allowed = 0;
  for (auto _ : state) {
    std::string key = cursor.Next();
    store.ApplyAsync({CheckItem{&bucket, key, 1}, CheckItem{&window, std::move(key), 1}},
                     [&allowed](absl::StatusOr<std::vector<Decision>> decisions) {
                       allowed += decisions.ok() && decisions->front().allowed;
                     });
  }
  Record(state, allowed);
}
BENCHMARK(BM_MemoryStoreTwoLimits)->Threads(1)->Threads(2)->UseRealTime();

// The same through the public Limiter API (name lookup, validation, MultiDecision).
Limiter& SharedLimiter() {
  static Limiter* limiter = [] {
    LimiterOptions options;
    options.limits = {LimitFor(0), LimitFor(1), LimitFor(2)};
    options.store = std::shared_ptr<Store>(&KeysStore(0), [](Store*) {});
    return Limiter::Create(std::move(options)).value().release();
  }();
  return *limiter;
}

void BM_LimiterHotKey(benchmark::State& state) {
  Limiter& limiter = SharedLimiter();
  const std::string& name = LimitFor(state.range(0)).name;
  int64_t allowed = 0;
  for (auto _ : state) {
    absl::StatusOr<Decision> decision = limiter.Check(name, "hot");
    allowed += decision.ok() && decision->allowed;
  }
  Record(state, allowed);
}
BENCHMARK(BM_LimiterHotKey)->Arg(0)->Threads(1)->Threads(2)->UseRealTime();

// The same one check through the several-limits API (request vector, MultiDecision).
void BM_LimiterCheckAllHotKey(benchmark::State& state) {
  Limiter& limiter = SharedLimiter();
  const std::vector<CheckRequest> request = {{LimitFor(state.range(0)).name, "hot", 1}};
  int64_t allowed = 0;
  for (auto _ : state) {
    absl::StatusOr<MultiDecision> decision = limiter.CheckAll(request);
    allowed += decision.ok() && decision->allowed;
  }
  Record(state, allowed);
}
BENCHMARK(BM_LimiterCheckAllHotKey)->Arg(0)->Threads(1)->UseRealTime();

void BM_LimiterDistinctKeys(benchmark::State& state) {
  Limiter& limiter = SharedLimiter();
  Prefill(KeysStore(0), LimitFor(state.range(0)));
  const std::string& name = LimitFor(state.range(0)).name;
  KeyCursor cursor(state.thread_index());
  int64_t allowed = 0;
  for (auto _ : state) {
    absl::StatusOr<Decision> decision = limiter.Check(name, cursor.Next());
    allowed += decision.ok() && decision->allowed;
  }
  Record(state, allowed);
}
BENCHMARK(BM_LimiterDistinctKeys)
    ->Arg(0)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime()
    ->MinTime(bench::MinTimeSeconds(2.0));

}  // namespace
}  // namespace tollgate
