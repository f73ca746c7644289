// Copyright tollgate authors.
#include "src/algorithm/share.h"

#include <array>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tollgate::algorithm {
namespace {

TEST(ShareTest, FloorsTheWeightedPartOfWhatIsLeft) {
  EXPECT_EQ(Share(100, EqualWeights(3)), 33);
  EXPECT_EQ(Share(100, EqualWeights(1)), 100);
  EXPECT_EQ(Share(2, EqualWeights(3)), 0);
  EXPECT_EQ(Share(-5, EqualWeights(2)), 0);
  EXPECT_EQ(Share(100, ShareWeights{3, 4}), 75);
  // A sliding window's weight leaves fractions a hair under a whole number: counted whole.
  EXPECT_EQ(Share(49.9999999999, EqualWeights(1)), 50);
  EXPECT_EQ(Share(49.99, EqualWeights(1)), 49);
  EXPECT_EQ(EqualWeights(0).total, 1);
}

TEST(ShareTest, FirstSharesOfAllInstancesFitInTheLimit) {
  for (int64_t limit : {1, 2, 7, 100, 103, 1000, 999'999}) {
    for (int64_t n : {1, 2, 3, 4, 8, 1000}) {
      EXPECT_LE(FirstShare(limit, n) * n, limit) << limit << " / " << n;
      EXPECT_GT((FirstShare(limit, n) + 1) * n, limit) << limit << " / " << n;
    }
  }
}

// The sync invariant: a grant never takes the window past its limit, counted and held
// included, and is 0 once nothing is left.
TEST(ShareTest, SyncGrantsNeverTakeCountedPlusGrantedPastTheLimit) {
  std::mt19937_64 random(42);
  for (int i = 0; i < 100'000; ++i) {
    SyncGrantInput in;
    in.limit = static_cast<int64_t>(random() % 5000) + 1;
    in.instances = static_cast<int64_t>(random() % 16) + 1;
    in.shares = random() % 2 == 0 ? Shares::kEqual : Shares::kDemand;
    in.weights = in.shares == Shares::kEqual
                     ? EqualWeights(in.instances)
                     : DemandWeights(static_cast<int64_t>(random() % 100),
                                     {static_cast<int64_t>(random() % 100)}, in.instances);
    in.used = static_cast<double>(random() % (in.limit + 50)) + (random() % 1000) / 1000.0;
    in.held_by_others = static_cast<int64_t>(random() % (in.limit + 1));
    in.others_without_grant = static_cast<int64_t>(random() % in.instances);
    const int64_t grant = SyncGrant(in);
    // floor(limit / N), floor(limit / (10N))
    const int64_t first_share =
        in.limit / (in.instances * (in.shares == Shares::kEqual ? 1 : kDemandFloorDivisor));
    const double held = static_cast<double>(in.held_by_others) +
                        static_cast<double>(in.others_without_grant * first_share);
    ASSERT_GE(grant, 0);
    if (in.used + held <= static_cast<double>(in.limit)) {
      EXPECT_LE(in.used + held + static_cast<double>(grant), static_cast<double>(in.limit) + 1e-6)
          << "limit " << in.limit << " used " << in.used << " held " << held;
    } else {
      EXPECT_EQ(grant, 0);
    }
  }
}

TEST(ShareTest, SyncGrantIsOneNthOfWhatNobodyHolds) {
  // Two instances, a limit of 100: 60 counted, the other holds 20: half of the 20 left.
  EXPECT_EQ(SyncGrant({.limit = 100,
                       .used = 60,
                       .held_by_others = 20,
                       .instances = 2,
                       .weights = EqualWeights(2)}),
            10);
  // The other has not synced the window: it may still spend its first 50.
  EXPECT_EQ(SyncGrant({.limit = 100,
                       .used = 50,
                       .others_without_grant = 1,
                       .instances = 2,
                       .weights = EqualWeights(2)}),
            0);
  // Sliding: previous 100 at weight 0.5 and 25 counted now.
  EXPECT_EQ(SyncGrant({.limit = 100, .used = 100 * 0.5 + 25, .instances = 1}), 25);
}

TEST(ShareTest, DemandFirstSharesAreATenthOfEqualOnes) {
  EXPECT_EQ(FirstShare(1000, 4, Shares::kDemand), 25);
  EXPECT_EQ(FirstShare(1000, 4, Shares::kEqual), 250);
  EXPECT_EQ(FirstShare(1000, 4), 250);
  EXPECT_EQ(FirstShare(39, 4, Shares::kDemand), 0);
  // Alone, an instance holds nothing back for others.
  EXPECT_EQ(FirstShare(39, 1, Shares::kDemand), 39);
  for (int64_t limit : {1, 7, 100, 1000, 999'999}) {
    for (int64_t n : {2, 4, 8, 1000}) {
      EXPECT_LE(FirstShare(limit, n, Shares::kDemand) * n * kDemandFloorDivisor, limit);
    }
  }
}

TEST(ShareTest, DemandWeightsFollowReportedDemandAboveAFloor) {
  // Nobody asked for anything: everybody weighs the same.
  const ShareWeights idle = DemandWeights(0, {0, 0}, 4);
  EXPECT_EQ(idle.self, 1);
  EXPECT_EQ(idle.total, 4);
  // A key pinned to this one of 4 instances: 3 unreported ones weigh the floor, D / 40 each.
  const ShareWeights pinned = DemandWeights(100, {}, 4);
  EXPECT_EQ(pinned.self, 4000);
  EXPECT_EQ(pinned.total, 4000 + 3 * 100);
  // Even demand: 1/N each.
  const ShareWeights even = DemandWeights(50, {50, 50, 50}, 4);
  EXPECT_DOUBLE_EQ(static_cast<double>(even.self) / static_cast<double>(even.total), 0.25);
  // Half of the demand here, the rest spread over 3 of the other 7 (4 unreported).
  const ShareWeights half = DemandWeights(300, {100, 100, 100}, 8);
  EXPECT_EQ(half.self, 80 * 300);
  EXPECT_EQ(half.total, 80 * 600 + 4 * 600);
  // No demand here while the others ask: the floor, 1/(10N) of the demand relative to them.
  const ShareWeights quiet = DemandWeights(0, {100}, 2);
  EXPECT_EQ(quiet.self, 100);
  EXPECT_EQ(quiet.total, 100 + 2000);
  // More fresh reports than N (a registry that lags): still a part of the whole.
  const ShareWeights crowded = DemandWeights(10, {10, 10, 10}, 2);
  EXPECT_LE(crowded.self, crowded.total);
  EXPECT_EQ(crowded.total, 4 * 20 * 10);
}

TEST(ShareTest, APinnedKeyIsSetAsideAllButTheOthersFloors) {
  // 4 instances, a limit of 1,000, all demand on this one: the other 3 keep 25 each.
  EXPECT_EQ(NextFirstShare({.limit = 1000, .instances = 4, .weights = DemandWeights(80, {}, 4)}),
            925);
  // Even demand: a quarter each, as long as the others' first shares leave it.
  const ShareWeights even = DemandWeights(50, {50, 50, 50}, 4);
  EXPECT_EQ(NextFirstShare({.limit = 1000,
                            .others_first_shares = 750,
                            .others_with_first_share = 3,
                            .instances = 4,
                            .weights = even}),
            250);
  EXPECT_EQ(NextFirstShare({.limit = 1000,
                            .others_first_shares = 800,
                            .others_with_first_share = 3,
                            .instances = 4,
                            .weights = even}),
            200);
  // The next window has started: never more than what its grants held for this one.
  EXPECT_EQ(NextFirstShare({.limit = 1000,
                            .instances = 4,
                            .weights = DemandWeights(80, {}, 4),
                            .next_window_started = true,
                            .own_first_share = 300}),
            300);
  EXPECT_EQ(NextFirstShare({.limit = 1000,
                            .instances = 4,
                            .weights = DemandWeights(80, {}, 4),
                            .next_window_started = true}),
            25);
}

// Instances setting their first shares of one window in any order, with any demands: the
// first shares and the floors of those without one never sum to more than the limit.
TEST(ShareTest, FirstSharesAndFloorsNeverSumPastTheLimit) {
  std::mt19937_64 random(26);
  for (int round = 0; round < 2000; ++round) {
    const int64_t limit = static_cast<int64_t>(random() % 5000) + 1;
    const int64_t n = static_cast<int64_t>(random() % 12) + 1;
    std::vector<int64_t> first_shares(n, -1);
    std::vector<int64_t> demands(n);
    for (int step = 0; step < 40; ++step) {
      const int64_t self = static_cast<int64_t>(random() % n);
      for (int64_t& demand : demands) {
        if (random() % 3 == 0) demand = static_cast<int64_t>(random() % 200);
      }
      std::vector<int64_t> others;
      NextFirstShareInput in{.limit = limit, .instances = n, .weights = {}};
      for (int64_t j = 0; j < n; ++j) {
        if (j == self) continue;
        if (random() % 4 != 0) others.push_back(demands[j]);  // fresh or not
        if (first_shares[j] >= 0) {
          in.others_first_shares += first_shares[j];
          ++in.others_with_first_share;
        }
      }
      in.weights = DemandWeights(demands[self], others, n);
      ASSERT_LE(in.weights.self, in.weights.total);
      first_shares[self] = NextFirstShare(in);
      ASSERT_GE(first_shares[self], 0);
      int64_t reserved = 0;
      for (int64_t share : first_shares) {
        reserved += share >= 0 ? share : FirstShare(limit, n, Shares::kDemand);
      }
      ASSERT_LE(reserved, limit) << "limit " << limit << " N " << n;
    }
  }
}

TEST(ShareTest, FallbackSharesAreAtLeastOneAndSumToAtMostTheLargerOfLimitAndN) {
  for (int64_t limit : {1, 3, 10, 100, 1001}) {
    for (int64_t n : {1, 2, 4, 7, 50}) {
      const int64_t share = FallbackShare(limit, EqualWeights(n));
      EXPECT_GE(share, 1);
      EXPECT_LE(share * n, std::max(limit, n)) << limit << " / " << n;
    }
  }
}

TEST(ShareTest, FallbackNumbersShareEveryAlgorithm) {
  LimitNumbers bucket{.algorithm = Algorithm::kTokenBucket, .capacity = 10, .refill_per_second = 4};
  const LimitNumbers bucket_share = FallbackNumbers(bucket, EqualWeights(4));
  EXPECT_EQ(bucket_share.capacity, 2);
  EXPECT_DOUBLE_EQ(bucket_share.refill_per_second, 1.0);
  LimitNumbers window{.algorithm = Algorithm::kFixedWindow, .limit = 3, .window_micros = 1};
  EXPECT_EQ(FallbackNumbers(window, EqualWeights(4)).limit, 1);  // never below 1
  // One instance keeps the numbers as they are, however large.
  window.limit = (int64_t{1} << 62) + 1;
  EXPECT_EQ(FallbackNumbers(window, EqualWeights(1)).limit, window.limit);
}

TEST(ShareTest, DemandFractionFollowsTheSmallerOfTheTwoLearnedPeriods) {
  // With N = 4 every instance counts kFallbackDemandPrior (4) requests more: g = (own + 4) /
  // (fleet + 16).
  static_assert(kFallbackDemandPrior == 4);
  const FallbackDemandPeriod half{.own = 50, .fleet = 100};
  const FallbackDemandPeriod third{.own = 10, .fleet = 30};
  EXPECT_DOUBLE_EQ(FallbackDemandFraction({}, 4, 1.0), 0.25);  // nothing learned: equal
  const std::vector<FallbackDemandPeriod> both = {half, third};
  EXPECT_DOUBLE_EQ(FallbackDemandFraction(both, 4, 1.0), 14.0 / 46);
  // Forgotten: equal; half-way: half-way between the learned and the equal fraction.
  EXPECT_DOUBLE_EQ(FallbackDemandFraction(both, 4, 0.0), 0.25);
  EXPECT_DOUBLE_EQ(FallbackDemandFraction(both, 4, 0.5), 0.25 + 0.5 * (14.0 / 46 - 0.25));
  // A period nobody asked in says nothing: equal for it.
  const std::vector<FallbackDemandPeriod> idle = {{.own = 0, .fleet = 0}, {.own = 9, .fleet = 10}};
  EXPECT_DOUBLE_EQ(FallbackDemandFraction(idle, 4, 1.0), 0.25);
  // An instance that saw none of the fleet's many requests keeps the floor, 1 / (10 N).
  const std::vector<FallbackDemandPeriod> none = {{.own = 0, .fleet = 800},
                                                  {.own = 0, .fleet = 900}};
  EXPECT_DOUBLE_EQ(FallbackDemandFraction(none, 4, 1.0), 1.0 / 40);
  // All of many: nearly the whole limit, never more.
  const std::vector<FallbackDemandPeriod> all = {{.own = 8000, .fleet = 8000},
                                                 {.own = 9500, .fleet = 9000}};
  EXPECT_GT(FallbackDemandFraction(all, 4, 1.0), 0.998);
  EXPECT_LE(FallbackDemandFraction(all, 4, 1.0), 1.0);
}

// The demo's outage (issue 45): 8 instances, one user's 20 requests a period spread evenly by
// the balancer, so chance alone gives some instances none in a period. Without the prior
// those fell to the floor (a tenth of an equal share) and the fleet starved; with it no
// instance falls below 60% of an equal share, and the fleet keeps most of the limit.
TEST(ShareTest, APeriodOfFewRequestsKeepsSharesNearEqual) {
  const int64_t n = 8;
  const double equal = 1.0 / n;
  const std::vector<FallbackDemandPeriod> unlucky = {{.own = 0, .fleet = 20},
                                                     {.own = 3, .fleet = 20}};
  EXPECT_GT(FallbackDemandFraction(unlucky, n, 1.0), 0.6 * equal);
  // Over every split of 20 requests a period that chance gives (a binomial draw per period),
  // the fleet's fractions sum to at least 80% of the limit on average.
  std::mt19937_64 random(45);
  double sum_of_sums = 0;
  const int rounds = 2'000;
  for (int round = 0; round < rounds; ++round) {
    std::array<std::array<int64_t, 2>, n> own{};
    for (size_t p = 0; p < 2; ++p) {
      for (int request = 0; request < 20; ++request) ++own[random() % n][p];
    }
    double sum = 0;
    for (const auto& periods : own) {
      const std::vector<FallbackDemandPeriod> learned = {{.own = periods[0], .fleet = 20},
                                                         {.own = periods[1], .fleet = 20}};
      sum += FallbackDemandFraction(learned, n, 1.0);
    }
    sum_of_sums += sum;
  }
  EXPECT_GT(sum_of_sums / rounds, 0.8);
}

TEST(ShareTest, AnEqualFractionGivesExactlyTheEqualShare) {
  for (int64_t limit : {1, 3, 10, 99, 100, 1001, 999'999}) {
    for (int64_t n : {1, 2, 3, 4, 7, 50, 1000}) {
      const ShareWeights weights = FallbackFractionWeights(FallbackDemandFraction({}, n, 1.0), n);
      EXPECT_EQ(FallbackShare(limit, weights), FallbackShare(limit, EqualWeights(n)))
          << limit << " / " << n;
    }
  }
  EXPECT_EQ(FallbackShare(100, FallbackFractionWeights(1.0, 4)), 100);
  const LimitNumbers bucket{
      .algorithm = Algorithm::kTokenBucket, .capacity = 100, .refill_per_second = 10};
  EXPECT_EQ(FallbackNumbers(bucket, FallbackFractionWeights(1.0, 4)).capacity, 100);
  const LimitNumbers share = FallbackNumbers(bucket, FallbackFractionWeights(0.48, 4));
  EXPECT_EQ(share.capacity, 48);
  EXPECT_DOUBLE_EQ(share.refill_per_second, 4.8);
}

// The bound of docs/resilience.md: whatever the demand, and with instances whose newest
// learned periods differ by one, the fleet's shares sum to at most 1.1 x the limit, plus one
// unit for each instance whose share is raised to 1.
TEST(ShareTest, DemandSharesOfTheFleetSumToAtMostElevenTenthsOfTheLimit) {
  std::mt19937_64 random(26);
  for (int round = 0; round < 20'000; ++round) {
    const int64_t n = static_cast<int64_t>(random() % 12) + 1;
    const int64_t limit = static_cast<int64_t>(random() % 3000) + 1;
    // Each instance's demand in periods a-1, a and a+1 (some ask for nothing).
    std::vector<std::array<int64_t, 3>> own(n);
    std::array<int64_t, 3> fleet{};
    for (auto& periods : own) {
      for (size_t p = 0; p < 3; ++p) {
        periods[p] = random() % 3 == 0 ? 0 : static_cast<int64_t>(random() % 1000);
        fleet[p] += periods[p];
      }
    }
    int64_t sum = 0;
    int64_t raised = 0;
    for (int64_t i = 0; i < n; ++i) {
      const size_t newest = random() % 2 + 1;  // learned (a-1, a) or (a, a+1)
      const std::vector<FallbackDemandPeriod> periods = {
          {.own = own[i][newest - 1], .fleet = fleet[newest - 1]},
          {.own = own[i][newest], .fleet = fleet[newest]}};
      const ShareWeights weights =
          FallbackFractionWeights(FallbackDemandFraction(periods, n, 1.0), n);
      if (Share(static_cast<double>(limit), weights) == 0) ++raised;
      sum += FallbackShare(limit, weights);
    }
    ASSERT_LE(sum, limit + limit / 10 + raised) << "limit " << limit << " N " << n;
  }
}

// Issue 26's case: traffic on 2 of 4 instances. Equal shares leave half the limit unused;
// demand shares give the busy two about all of it.
TEST(ShareTest, DemandSharesFollowTrafficOnTwoOfFourInstances) {
  const int64_t limit = 200;
  const std::array<int64_t, 4> asked = {480, 520, 0, 0};  // per period, two periods alike
  int64_t demand = 0;
  int64_t equal = 0;
  for (int64_t own : asked) {
    const std::vector<FallbackDemandPeriod> periods(2, {.own = own, .fleet = 1000});
    const int64_t share =
        FallbackShare(limit, FallbackFractionWeights(FallbackDemandFraction(periods, 4, 1.0), 4));
    if (own > 0) demand += share;
    equal += own > 0 ? FallbackShare(limit, EqualWeights(4)) : 0;
  }
  EXPECT_GE(demand, limit * 95 / 100);
  EXPECT_LE(demand, limit);
  EXPECT_EQ(equal, limit / 2);
}

}  // namespace
}  // namespace tollgate::algorithm
