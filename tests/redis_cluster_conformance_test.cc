// Copyright tollgate authors. The store conformance suite (tests/store_conformance.h) and the
// metered work's (tests/metered_conformance.h) against RedisStore on a real Redis Cluster of
// three primaries: every case's keys differ by test, so its batches span slots and take the
// multi-slot path (one script call per slot, refunds on refusal).
#include "tests/metered_conformance.h"
#include "tests/support/redis_cluster.h"

namespace tollgate {
namespace {

// One cluster for the whole binary (the suites' keys are unique per case), killed by its
// destructor at exit.
absl::StatusOr<std::string> SharedClusterUrl() {
  static absl::StatusOr<std::unique_ptr<testing::RedisCluster>> cluster =
      testing::RedisCluster::Start(/*primaries=*/3, /*replicas_per_primary=*/0);
  if (!cluster.ok()) return cluster.status();
  return (*cluster)->url();
}

absl::StatusOr<StoreUnderTest> MakeClusterStore() {
  absl::StatusOr<std::string> url = SharedClusterUrl();
  if (!url.ok()) return url.status();
  return RedisUnderTest(*url);
}

// Every request (each slot's share of it) decided in a batch, between requests of another
// limit on the same entity key.
absl::StatusOr<StoreUnderTest> MakeBatchedClusterStore() {
  absl::StatusOr<std::string> url = SharedClusterUrl();
  if (!url.ok()) return url.status();
  return RedisUnderTest(*url, /*batched=*/true);
}

std::string Name(const ::testing::TestParamInfo<StoreFactory>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(ClusterStores, StoreConformanceTest,
                         ::testing::Values(StoreFactory{"Cluster", &MakeClusterStore},
                                           StoreFactory{"ClusterBatched",
                                                        &MakeBatchedClusterStore}),
                         Name);
INSTANTIATE_TEST_SUITE_P(ClusterStores, MeteredConformanceTest,
                         ::testing::Values(StoreFactory{"Cluster", &MakeClusterStore},
                                           StoreFactory{"ClusterBatched",
                                                        &MakeBatchedClusterStore}),
                         Name);

}  // namespace
}  // namespace tollgate
