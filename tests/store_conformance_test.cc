// Copyright tollgate authors. The store conformance suite (tests/store_conformance.h) against
// the stores that need no Redis, on a simulated clock: MemoryStore, and ResilientStore over a
// MemoryStore (answered by it, with deadlines on simulated timers); and the metered work's
// (tests/metered_conformance.h: charges, reservations, leases) against both.
#include "tests/store_conformance.h"

#include <memory>

#include "tests/metered_conformance.h"
#include "tollgate/memory_store.h"

namespace tollgate {
namespace {

absl::StatusOr<StoreUnderTest> MakeMemoryStore() {
  // The clock must outlive the store: both live in one holder that the store pointer
  // shares ownership of.
  struct Holder {
    SimulatedClock clock;
    std::unique_ptr<MemoryStore> store;
  };
  auto holder = std::make_shared<Holder>();
  absl::StatusOr<std::unique_ptr<MemoryStore>> store =
      MemoryStore::Create({.clock = &holder->clock});
  if (!store.ok()) return store.status();
  holder->store = std::move(store).value();
  StoreUnderTest out;
  out.store = std::shared_ptr<Store>(holder, holder->store.get());
  out.advance = [holder](int64_t micros) { holder->clock.AdvanceMicros(micros); };
  out.source = DecisionSource::kMemory;
  return out;
}

absl::StatusOr<StoreUnderTest> MakeResilientStore() {
  return ResilientOver(
      [](Clock* clock) -> absl::StatusOr<std::shared_ptr<Store>> {
        absl::StatusOr<std::unique_ptr<MemoryStore>> primary =
            MemoryStore::Create({.clock = clock});
        if (!primary.ok()) return primary.status();
        return std::shared_ptr<Store>(*std::move(primary));
      },
      DecisionSource::kMemory);
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreConformanceTest,
                         ::testing::Values(StoreFactory{"Memory", &MakeMemoryStore},
                                           StoreFactory{"Resilient", &MakeResilientStore}),
                         [](const ::testing::TestParamInfo<StoreFactory>& info) {
                           return info.param.name;
                         });
INSTANTIATE_TEST_SUITE_P(Stores, MeteredConformanceTest,
                         ::testing::Values(StoreFactory{"Memory", &MakeMemoryStore},
                                           StoreFactory{"Resilient", &MakeResilientStore}),
                         [](const ::testing::TestParamInfo<StoreFactory>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace tollgate
