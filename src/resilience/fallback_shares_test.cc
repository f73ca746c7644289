// Copyright tollgate authors.
#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "src/algorithm/share.h"
#include "src/resilience/fallback_shares_impl.h"
#include "tollgate/clock.h"

namespace tollgate {
namespace {

using resilience::FallbackSharesImpl;
using Totals = FallbackSharesImpl::PeriodTotals;

// The totals of period - 1 and period - 2, as a heartbeat in a new period brings them.
std::vector<Totals> Previous(Totals previous, Totals before) {
  return {std::move(previous), std::move(before)};
}

// g of one period by the rule (src/algorithm/share.h): every instance is taken to have asked
// kFallbackDemandPrior requests more than it counted.
double G(double own, double fleet, int n) {
  const double prior = algorithm::kFallbackDemandPrior;
  return (own + prior) / (fleet + prior * n);
}

TEST(FallbackSharesTest, NothingLearnedIsTheEqualShare) {
  FallbackSharesImpl shares;
  shares.Count("api", 10);
  EXPECT_DOUBLE_EQ(shares.Fraction("api", 4), 0.25);
  EXPECT_EQ(shares.period(), -1);
  const FallbackSharesImpl::Counts counts = shares.TakeCounts();
  ASSERT_EQ(counts.size(), 1u);
  EXPECT_EQ(counts[0], (std::pair<std::string, int64_t>("api", 10)));
  EXPECT_TRUE(shares.TakeCounts().empty());  // taken: zero until counted again
}

TEST(FallbackSharesTest, LearnsItsShareOfTheFleetsDemandOverTwoPeriods) {
  SimulatedClock clock;
  FallbackSharesImpl shares({.clock = &clock});
  // Period 10: this instance reports 30 units of api into the incarnation "a".
  shares.Learn(10, "a", {{"api", 30}}, nullptr);
  // Period 11 (the fleet asked 100 in period 10, of which these 30): then 40 more.
  const std::vector<Totals> at_11 =
      Previous({.created = "a", .units = {{"api", 100}, {"search", 5}}}, {});
  shares.Learn(11, "b", {{"api", 40}}, &at_11);
  EXPECT_EQ(shares.period(), 11);
  // Period 9 is unknown (nobody asked): 1/N for it; period 10: 30 of 100. The min: 1/N.
  EXPECT_DOUBLE_EQ(shares.Fraction("api", 4), 0.25);
  // Period 12: the fleet asked 80 in period 11, 40 of them here: min(30 of 100, 40 of 80).
  const std::vector<Totals> at_12 =
      Previous({.created = "b", .units = {{"api", 80}}}, {.created = "a", .units = {{"api", 100}}});
  shares.Learn(12, "c", {}, &at_12);
  EXPECT_DOUBLE_EQ(shares.Fraction("api", 4), G(30, 100, 4));
  // A limit the fleet asked for and this instance did not: none of its own (with so few
  // requests, above the floor of 1 / (10 N)).
  const std::vector<Totals> at_13 =
      Previous({.created = "c", .units = {{"api", 10}, {"search", 50}}},
               {.created = "b", .units = {{"api", 80}, {"search", 50}}});
  shares.Learn(13, "d", {}, &at_13);
  EXPECT_DOUBLE_EQ(shares.Fraction("search", 4), G(0, 50, 4));
  // api: nothing asked here in period 12.
  EXPECT_DOUBLE_EQ(shares.Fraction("api", 4), G(0, 10, 4));
  const std::vector<std::pair<std::string, double>> fractions = shares.Fractions(4);
  ASSERT_EQ(fractions.size(), 2u);
  EXPECT_EQ(fractions[0].first, "api");
  EXPECT_EQ(fractions[1].first, "search");
  // Thousands asked elsewhere, none here: the floor.
  const std::vector<Totals> at_14 = Previous({.created = "d", .units = {{"api", 5000}}},
                                             {.created = "c", .units = {{"api", 10}}});
  shares.Learn(14, "e", {}, &at_14);
  const std::vector<Totals> at_15 = Previous({.created = "e", .units = {{"api", 4000}}},
                                             {.created = "d", .units = {{"api", 5000}}});
  shares.Learn(15, "f", {}, &at_15);
  EXPECT_DOUBLE_EQ(shares.Fraction("api", 4), 0.025);
}

TEST(FallbackSharesTest, UnitsAddedToALostIncarnationDoNotCount) {
  SimulatedClock clock;
  FallbackSharesImpl shares({.clock = &clock});
  shares.Learn(10, "a", {{"api", 90}}, nullptr);
  // Redis lost period 10's hash; another instance re-created it ("a2") and this one adds 10.
  shares.Learn(10, "a2", {{"api", 10}}, nullptr);
  const std::vector<Totals> at_11 =
      Previous({.created = "a2", .units = {{"api", 20}}}, {.created = "x", .units = {{"api", 20}}});
  shares.Learn(11, "b", {}, &at_11);
  // 10 of 20 in period 10 (not 100 of 20); period 9's hash is another incarnation than any
  // this instance added to: nothing of its own there.
  EXPECT_DOUBLE_EQ(shares.Fraction("api", 2), G(0, 20, 2));
  const std::vector<Totals> at_12 =
      Previous({.created = "b", .units = {{"api", 8}}}, {.created = "a2", .units = {{"api", 20}}});
  shares.Learn(12, "c", {}, &at_12);
  EXPECT_DOUBLE_EQ(shares.Fraction("api", 2), G(0, 8, 2));  // 0 of 8 in period 11
}

TEST(FallbackSharesTest, LearnedSharesDecayToEqualOverTheHorizon) {
  SimulatedClock clock;
  FallbackSharesImpl shares({.clock = &clock, .horizon_ms = 10'000});
  shares.Learn(10, "a", {{"api", 50}}, nullptr);
  const std::vector<Totals> at_11 =
      Previous({.created = "a", .units = {{"api", 50}}}, {.created = "z", .units = {{"api", 50}}});
  shares.Learn(11, "b", {{"api", 50}}, &at_11);
  // Period 9: none of the fleet's 50 here.
  EXPECT_DOUBLE_EQ(shares.Fraction("api", 2), G(0, 50, 2));
  const std::vector<Totals> at_12 =
      Previous({.created = "b", .units = {{"api", 50}}}, {.created = "a", .units = {{"api", 50}}});
  shares.Learn(12, "c", {}, &at_12);
  const double all = G(50, 50, 2);  // all of it, twice
  EXPECT_DOUBLE_EQ(shares.Fraction("api", 2), all);
  clock.AdvanceMillis(5'000);
  EXPECT_NEAR(shares.Fraction("api", 2), 0.5 + (all - 0.5) / 2, 1e-9);  // half-way to 1/2
  clock.AdvanceMillis(5'000);
  EXPECT_DOUBLE_EQ(shares.Fraction("api", 2), 0.5);
  clock.AdvanceMillis(60'000);
  EXPECT_DOUBLE_EQ(shares.Fraction("api", 2), 0.5);
  // A heartbeat in the same period refreshes what was learned.
  shares.Learn(12, "c", {}, nullptr);
  EXPECT_DOUBLE_EQ(shares.Fraction("api", 2), all);
}

TEST(FallbackSharesTest, CountsAtMostMaxLimits) {
  FallbackSharesImpl shares({.max_limits = 2});
  shares.Count("a", 1);
  shares.Count("b", 2);
  shares.Count("c", 3);
  shares.Count("a", 0);  // nothing asked
  const FallbackSharesImpl::Counts counts = shares.TakeCounts();
  ASSERT_EQ(counts.size(), 2u);
  int64_t total = 0;
  for (const auto& [limit, units] : counts) total += units;
  EXPECT_EQ(total, 3);
}

// One thread counting for several objects (a reload's old and new service, or objects made
// where an earlier one was freed) adds each count to its own object.
TEST(FallbackSharesTest, CountsReachTheirOwnObjectWhenOneThreadCountsForSeveral) {
  for (int round = 0; round < 3; ++round) {
    auto first = std::make_unique<FallbackSharesImpl>(FallbackSharesOptions{});
    FallbackSharesImpl second(FallbackSharesOptions{});
    first->Count("api", 2);
    second.Count("api", 5);
    first->Count("api", 3);
    second.Count("web", 1);
    EXPECT_EQ(first->TakeCounts(), (FallbackSharesImpl::Counts{{"api", 5}}));
    FallbackSharesImpl::Counts counts = second.TakeCounts();
    std::sort(counts.begin(), counts.end());
    EXPECT_EQ(counts, (FallbackSharesImpl::Counts{{"api", 5}, {"web", 1}}));
    // Counted from another thread too, both reach the same counter.
    std::thread([&] { first->Count("api", 4); }).join();
    first->Count("api", 1);
    EXPECT_EQ(first->TakeCounts(), (FallbackSharesImpl::Counts{{"api", 5}}));
  }
}

}  // namespace
}  // namespace tollgate
