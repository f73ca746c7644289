// Copyright tollgate authors. Metered work (charges, reservations, leases) against every
// store: the cases of issue 28 that each store must pass, on top of the store conformance
// suite (tests/store_conformance.h). Instantiated per store beside it: Redis
// (tests/redis_conformance_test.cc), a Redis Cluster (tests/redis_cluster_conformance_test.cc)
// and memory (tests/store_conformance_test.cc).
#ifndef TOLLGATE_TESTS_METERED_CONFORMANCE_H_
#define TOLLGATE_TESTS_METERED_CONFORMANCE_H_

#include <string>
#include <vector>

#include "tests/store_conformance.h"

namespace tollgate {
namespace {

class MeteredConformanceTest : public StoreConformanceTest {
 protected:
  Decision Apply(const Limit& limit, std::string_view key, int64_t cost, ItemOp op,
                 std::string id = "") {
    CheckItem item{&limit, Key(key), cost};
    item.op = op;
    item.id = std::move(id);
    absl::StatusOr<std::vector<Decision>> decisions = store().Apply({std::move(item)});
    EXPECT_TRUE(decisions.ok()) << decisions.status();
    if (!decisions.ok() || decisions->size() != 1) {
      ADD_FAILURE() << "no decision";
      return Decision{};
    }
    return decisions->front();
  }
  Decision Charge(const Limit& limit, std::string_view key, int64_t cost) {
    return Apply(limit, key, cost, ItemOp::kCharge);
  }
};

// A charge is never refused and applies in full; the debt it leaves refuses the next check,
// a peek too, with a retry_after that says when; what it leaves is reported.
TEST_P(MeteredConformanceTest, DebtFromAChargeRefusesTheNextCheck) {
  for (const Limit& limit : SlowLimits(5)) {
    const Decision within = Charge(limit, "k", 3);
    EXPECT_TRUE(within.allowed) << limit.name;
    EXPECT_EQ(within.remaining, 2) << limit.name;
    EXPECT_EQ(within.debt, 0) << limit.name;
    EXPECT_EQ(within.source, under_test_.source);
    const Decision over = Charge(limit, "k", 6);
    EXPECT_TRUE(over.allowed) << limit.name;
    EXPECT_EQ(over.reason, DenyReason::kNone);
    EXPECT_EQ(over.remaining, 0) << limit.name;
    EXPECT_EQ(over.debt, 4) << limit.name;
    EXPECT_GT(over.retry_after_micros, 0) << limit.name;

    const Decision refused = CheckOne(limit, "k", 1);
    EXPECT_FALSE(refused.allowed) << limit.name;
    EXPECT_EQ(refused.reason, DenyReason::kOverLimit);
    EXPECT_EQ(refused.debt, 4) << limit.name;
    EXPECT_GT(refused.retry_after_micros, 0) << limit.name;
    const Decision peek = CheckOne(limit, "k", 0);
    EXPECT_FALSE(peek.allowed) << limit.name;  // in debt, even a peek is refused
    EXPECT_EQ(peek.debt, 4) << limit.name;
    // A key not in debt is not affected.
    EXPECT_TRUE(CheckOne(limit, "other", 5).allowed) << limit.name;
  }
}

// In a batch a charge is applied whatever the checks beside it do, and before they are
// decided: a refused batch takes nothing of its checks but keeps its charges.
TEST_P(MeteredConformanceTest, AChargeInARefusedBatchStillApplies) {
  const std::vector<Limit> limits = SlowLimits(5);
  const Limit& bucket = limits[0];
  const Limit& fixed = limits[1];
  CheckItem check{&bucket, Key("k"), 6};  // more than the bucket ever holds: refused
  CheckItem charge{&fixed, Key("k"), 2};
  charge.op = ItemOp::kCharge;
  absl::StatusOr<std::vector<Decision>> batch = store().Apply({check, charge});
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_FALSE((*batch)[0].allowed);
  EXPECT_TRUE((*batch)[1].allowed);
  EXPECT_EQ((*batch)[1].remaining, 3);
  EXPECT_EQ(CheckOne(fixed, "k", 0).remaining, 3);
  EXPECT_EQ(CheckOne(bucket, "k", 0).remaining, 5);

  // A check sees the charge of its own batch, whatever their order: 3 left, a charge of 1
  // leaves 2, which a cost of 2 takes.
  CheckItem more{&fixed, Key("k"), 1};
  more.op = ItemOp::kCharge;
  absl::StatusOr<std::vector<Decision>> seen =
      store().Apply({CheckItem{&fixed, Key("k"), 2}, more});
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_TRUE((*seen)[0].allowed);
  EXPECT_EQ((*seen)[0].remaining, 0);
  EXPECT_EQ(CheckOne(fixed, "k", 0).remaining, 0);
}

// Charges of several limits and keys in one call, as POST /v1/charge sends them.
TEST_P(MeteredConformanceTest, ChargesOfSeveralLimitsInOneCall) {
  const std::vector<Limit> limits = SlowLimits(10);
  std::vector<CheckItem> items;
  for (const Limit& limit : limits) {
    CheckItem item{&limit, Key("tenant"), 4};
    item.op = ItemOp::kCharge;
    items.push_back(item);
    item.key = Key("another tenant");
    item.cost = 12;
    items.push_back(item);
  }
  absl::StatusOr<std::vector<Decision>> charged = store().Apply(std::move(items));
  ASSERT_TRUE(charged.ok()) << charged.status();
  ASSERT_EQ(charged->size(), 6u);
  for (size_t i = 0; i < charged->size(); ++i) {
    EXPECT_TRUE((*charged)[i].allowed) << i;
    EXPECT_EQ((*charged)[i].debt, i % 2 == 0 ? 0 : 2) << i;
  }
  for (const Limit& limit : limits) {
    EXPECT_EQ(CheckOne(limit, "tenant", 0).remaining, 6) << limit.name;
    EXPECT_FALSE(CheckOne(limit, "another tenant", 0).allowed) << limit.name;
  }
}

}  // namespace
}  // namespace tollgate

#endif  // TOLLGATE_TESTS_METERED_CONFORMANCE_H_
