// Copyright tollgate authors. FallbackShares::Count, which every check of a demand-shared
// fail_open limit makes on its event loop: from one thread, and from two threads counting the
// same limit at once (two loops of `tollgate serve`).
//
//   cmake -S . -B build-rel -G Ninja -DCMAKE_BUILD_TYPE=Release -DTOLLGATE_BUILD_BENCH=ON
//   cmake --build build-rel --target fallback_shares_bench
//   build-rel/bench/fallback_shares_bench
#include "benchmark/benchmark.h"
#include "tollgate/fallback_shares.h"

namespace tollgate {
namespace {

FallbackShares& Shares() {
  static FallbackShares* const shares = new FallbackShares(FallbackSharesOptions{});
  return *shares;
}

void BM_Count(benchmark::State& state) {
  FallbackShares& shares = Shares();
  for (auto _ : state) shares.Count("api_per_user", 1);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Count)->Threads(1)->Threads(2)->UseRealTime();

}  // namespace
}  // namespace tollgate
