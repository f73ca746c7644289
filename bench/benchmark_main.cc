// Copyright tollgate authors. main() of the Google Benchmark targets that measure lock-heavy
// code (bench/memory_bench, bench/sync_bench): Google Benchmark's own main, run the way
// production binaries run.
#include "absl/synchronization/mutex.h"
#include "benchmark/benchmark.h"

int main(int argc, char** argv) {
  // Debian's Abseil is built without NDEBUG, so every Mutex::Lock would also update a
  // process-wide deadlock graph under a global lock; `tollgate serve` turns this off too.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
