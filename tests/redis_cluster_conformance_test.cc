// Copyright tollgate authors. The store conformance suite (tests/store_conformance.h) and the
// metered work's (tests/metered_conformance.h) against RedisStore on a real Redis Cluster of
// three primaries: every case's keys differ by test, so its batches span slots and take the
// multi-slot path (one script call per slot, refunds on refusal).
#include "tests/metered_conformance.h"
#include "tests/support/redis_cluster.h"

namespace tollgate {
namespace {

absl::StatusOr<StoreUnderTest> MakeClusterStore() {
  // One cluster for the whole binary (the suites' keys are unique per case), killed by its
  // destructor at exit.
  static absl::StatusOr<std::unique_ptr<testing::RedisCluster>> cluster =
      testing::RedisCluster::Start(/*primaries=*/3, /*replicas_per_primary=*/0);
  if (!cluster.ok()) return cluster.status();
  return RedisUnderTest((*cluster)->url());
}

std::string Name(const ::testing::TestParamInfo<StoreFactory>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(ClusterStores, StoreConformanceTest,
                         ::testing::Values(StoreFactory{"Cluster", &MakeClusterStore}), Name);
INSTANTIATE_TEST_SUITE_P(ClusterStores, MeteredConformanceTest,
                         ::testing::Values(StoreFactory{"Cluster", &MakeClusterStore}), Name);

}  // namespace
}  // namespace tollgate
