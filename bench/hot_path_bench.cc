// Copyright tollgate authors. Parts of every decision of `tollgate serve` on its event loop.
// The shared state a Redis decision touches, from one thread and from two at once (two
// loops): the circuit breaker's Admit and RecordSuccess, and FallbackShares::Count (a
// demand-shared fail_open limit).
//
//   cmake -S . -B build-rel -G Ninja -DCMAKE_BUILD_TYPE=Release -DTOLLGATE_BUILD_BENCH=ON
//   cmake --build build-rel --target hot_path_bench
//   build-rel/bench/hot_path_bench
#include <cstddef>
#include <string>

#include "benchmark/benchmark.h"
#include "src/resilience/circuit_breaker.h"
#include "tollgate/clock.h"
#include "tollgate/fallback_shares.h"

namespace tollgate {
namespace {

FallbackShares& Shares() {
  static const std::shared_ptr<FallbackShares> shares = FallbackShares::Create();
  return *shares;
}

void BM_Count(benchmark::State& state) {
  FallbackShares& shares = Shares();
  for (auto _ : state) shares.Count("api_per_user", 1);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Count)->Threads(1)->Threads(2)->UseRealTime();

resilience::CircuitBreaker& Breaker() {
  static auto* const breaker = new resilience::CircuitBreaker(
      {.failure_threshold = 5, .open_duration_ms = 500}, &SystemClock());
  return *breaker;
}

// One call's worth: admitted, then answered.
void BM_BreakerAdmitAndSucceed(benchmark::State& state) {
  resilience::CircuitBreaker& breaker = Breaker();
  for (auto _ : state) {
    benchmark::DoNotOptimize(breaker.Admit());
    benchmark::DoNotOptimize(breaker.RecordSuccess(false));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_BreakerAdmitAndSucceed)->Threads(1)->Threads(2)->UseRealTime();

}  // namespace
}  // namespace tollgate
