// Copyright tollgate authors. Metered work (charges, reservations, leases) against every
// store: the cases of issue 28 that each store must pass, on top of the store conformance
// suite (tests/store_conformance.h). Instantiated per store beside it: Redis
// (tests/redis_conformance_test.cc), a Redis Cluster (tests/redis_cluster_conformance_test.cc),
// memory and the resilient store over it (tests/store_conformance_test.cc).
#ifndef TOLLGATE_TESTS_METERED_CONFORMANCE_H_
#define TOLLGATE_TESTS_METERED_CONFORMANCE_H_

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "src/core/metered_ids.h"
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
  // Lets `micros` pass: on the store's clock, or (a store that keeps its own time) for real.
  void Wait(int64_t micros) {
    if (under_test_.advance) {
      under_test_.advance(micros);
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(micros));
    }
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

// Reserve, then settle lower (the difference comes back), higher (the extra is charged), or
// again (nothing changes); an unknown id (forged) is refused and changes nothing.
TEST_P(MeteredConformanceTest, SettleLowerRefundsHigherChargesAndOnlyOnce) {
  if (!under_test_.reservations_and_leases) GTEST_SKIP() << "no reservations or leases here";
  for (const Limit& limit : SlowLimits(100)) {
    const std::string low = internal::NewMeteredId();
    const std::string high = internal::NewMeteredId();
    ASSERT_TRUE(Apply(limit, "k", 40, ItemOp::kReserve, low).allowed) << limit.name;
    const Decision reserved = Apply(limit, "k", 30, ItemOp::kReserve, high);
    ASSERT_TRUE(reserved.allowed) << limit.name;
    EXPECT_EQ(reserved.remaining, 30) << limit.name;

    const Decision lower = Apply(limit, "k", 25, ItemOp::kSettle, low);  // 15 come back
    EXPECT_TRUE(lower.allowed) << limit.name;
    EXPECT_EQ(lower.reason, DenyReason::kNone);
    EXPECT_EQ(lower.remaining, 45) << limit.name;
    const Decision higher = Apply(limit, "k", 80, ItemOp::kSettle, high);  // 50 more
    EXPECT_TRUE(higher.allowed) << limit.name;
    EXPECT_EQ(higher.remaining, 0) << limit.name;
    EXPECT_EQ(higher.debt, 5) << limit.name;

    const Decision again = Apply(limit, "k", 0, ItemOp::kSettle, low);
    EXPECT_FALSE(again.allowed) << limit.name;
    EXPECT_EQ(again.reason, DenyReason::kAlreadySettled) << limit.name;
    EXPECT_EQ(again.debt, 5) << limit.name;  // nothing came back
    const Decision forged = Apply(limit, "k", 0, ItemOp::kSettle, internal::NewMeteredId());
    EXPECT_FALSE(forged.allowed) << limit.name;
    EXPECT_EQ(forged.reason, DenyReason::kNotFound) << limit.name;
    // Another key's reservation id does not settle this key's.
    EXPECT_EQ(Apply(limit, "other", 0, ItemOp::kSettle, high).reason, DenyReason::kNotFound);
    EXPECT_EQ(CheckOne(limit, "k", 0).debt, 5) << limit.name;
  }
}

// An unsettled reservation stays charged at its estimate, and is forgotten after the limit's
// reservation_ttl: a settle then is refused (kNotFound) and gives nothing back.
TEST_P(MeteredConformanceTest, AnUnsettledReservationIsForgottenAfterItsTtl) {
  if (!under_test_.reservations_and_leases) GTEST_SKIP() << "no reservations or leases here";
  constexpr int64_t kTtl = 400'000;  // Redis keeps its own time: a short real TTL
  for (Limit limit : SlowLimits(100)) {
    limit.reservation_ttl_micros = kTtl;
    const std::string forgotten = internal::NewMeteredId();
    const std::string kept = internal::NewMeteredId();
    ASSERT_TRUE(Apply(limit, "k", 30, ItemOp::kReserve, forgotten).allowed) << limit.name;
    Wait(kTtl / 2);
    ASSERT_TRUE(Apply(limit, "k", 20, ItemOp::kReserve, kept).allowed) << limit.name;
    Wait(kTtl / 2 + kTtl / 4);
    const Decision late = Apply(limit, "k", 0, ItemOp::kSettle, forgotten);
    EXPECT_FALSE(late.allowed) << limit.name;
    EXPECT_EQ(late.reason, DenyReason::kNotFound) << limit.name;
    EXPECT_EQ(CheckOne(limit, "k", 0).remaining, 50) << limit.name;  // still charged
    const Decision settled = Apply(limit, "k", 0, ItemOp::kSettle, kept);
    EXPECT_TRUE(settled.allowed) << limit.name;
    EXPECT_EQ(settled.remaining, 70) << limit.name;
  }
}

// A reservation in a refused batch reserves nothing: no consumption, no record to settle.
TEST_P(MeteredConformanceTest, ARefusedBatchReservesNothing) {
  if (!under_test_.reservations_and_leases) GTEST_SKIP() << "no reservations or leases here";
  const std::vector<Limit> limits = SlowLimits(10);
  const std::string id = internal::NewMeteredId();
  CheckItem reserve{&limits[0], Key("k"), 4};
  reserve.op = ItemOp::kReserve;
  reserve.id = id;
  CheckItem over{&limits[1], Key("other"), 11};  // never fits: refuses the batch
  absl::StatusOr<std::vector<Decision>> refused = store().Apply({reserve, over});
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_TRUE((*refused)[0].allowed);  // alone it would pass
  EXPECT_EQ((*refused)[0].remaining, 10);
  EXPECT_FALSE((*refused)[1].allowed);
  EXPECT_EQ(CheckOne(limits[0], "k", 0).remaining, 10);
  EXPECT_EQ(Apply(limits[0], "k", 0, ItemOp::kSettle, id).reason, DenyReason::kNotFound);
  EXPECT_EQ(CheckOne(limits[0], "k", 0).remaining, 10);
}

// Requests per minute, a reservation of tokens and a charge, as one gateway request: the
// reservation and the check are all or nothing together.
TEST_P(MeteredConformanceTest, RequestsAndAReservationAreAllOrNothing) {
  if (!under_test_.reservations_and_leases) GTEST_SKIP() << "no reservations or leases here";
  const Limit requests = Window("conformance_rpm", Algorithm::kFixedWindow, 2, kYear);
  const Limit tokens = TokenBucket("conformance_tpm", 1000, 1e-3);
  std::string last_id;
  auto request = [&](int64_t estimate) {
    last_id = internal::NewMeteredId();
    CheckItem reserve{&tokens, Key("tenant"), estimate};
    reserve.op = ItemOp::kReserve;
    reserve.id = last_id;
    absl::StatusOr<std::vector<Decision>> decisions =
        store().Apply({CheckItem{&requests, Key("tenant"), 1}, reserve});
    EXPECT_TRUE(decisions.ok()) << decisions.status();
    return decisions.ok() && (*decisions)[0].allowed && (*decisions)[1].allowed;
  };
  EXPECT_TRUE(request(600));
  EXPECT_FALSE(request(600));  // 400 tokens left: refused, and its request not counted
  EXPECT_EQ(CheckOne(requests, "tenant", 0).remaining, 1);
  EXPECT_TRUE(request(300));
  EXPECT_FALSE(request(1));  // no request left: refused, and its tokens not reserved
  EXPECT_EQ(CheckOne(tokens, "tenant", 0).remaining, 100);
  EXPECT_EQ(Apply(tokens, "tenant", 0, ItemOp::kSettle, last_id).reason, DenyReason::kNotFound);
}

Limit Concurrency(std::string name, int64_t limit, int64_t lease_micros) {
  return Window(std::move(name), Algorithm::kConcurrency, limit, lease_micros);
}

// Acquire up to the limit, then refused with a retry_after; a release frees one slot and is
// idempotent; an unknown lease releases nothing.
TEST_P(MeteredConformanceTest, LeasesUpToTheLimitAndAReleaseFreesOne) {
  if (!under_test_.reservations_and_leases) GTEST_SKIP() << "no reservations or leases here";
  const Limit limit = Concurrency("conformance_leases", 3, kYear);
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    ids.push_back(internal::NewMeteredId());
    const Decision taken = Apply(limit, "k", 1, ItemOp::kCheck, ids.back());
    ASSERT_TRUE(taken.allowed) << i;
    EXPECT_EQ(taken.remaining, 2 - i);
    EXPECT_EQ(taken.limit, 3);
    EXPECT_EQ(taken.source, under_test_.source);
  }
  const Decision full = Apply(limit, "k", 1, ItemOp::kCheck, internal::NewMeteredId());
  EXPECT_FALSE(full.allowed);
  EXPECT_EQ(full.reason, DenyReason::kOverLimit);
  EXPECT_GT(full.retry_after_micros, kYear - 3600 * kSecond);  // when the first lease expires
  EXPECT_EQ(CheckOne(limit, "k", 0).remaining, 0);             // a peek
  EXPECT_TRUE(CheckOne(limit, "another", 0).allowed);

  const Decision released = Apply(limit, "k", 1, ItemOp::kRelease, ids[1]);
  EXPECT_TRUE(released.allowed);
  EXPECT_EQ(released.remaining, 1);
  const Decision again = Apply(limit, "k", 1, ItemOp::kRelease, ids[1]);
  EXPECT_FALSE(again.allowed);
  EXPECT_EQ(again.reason, DenyReason::kNotFound);
  EXPECT_EQ(again.remaining, 1);
  EXPECT_EQ(Apply(limit, "k", 1, ItemOp::kRelease, internal::NewMeteredId()).reason,
            DenyReason::kNotFound);
  EXPECT_TRUE(Apply(limit, "k", 1, ItemOp::kCheck, internal::NewMeteredId()).allowed);
  EXPECT_FALSE(Apply(limit, "k", 1, ItemOp::kCheck, internal::NewMeteredId()).allowed);
}

// A lease neither renewed nor released expires and frees its slot; a renewed one stays; an
// expired one cannot be renewed.
TEST_P(MeteredConformanceTest, AnExpiredLeaseFreesItsSlotARenewedOneStays) {
  if (!under_test_.reservations_and_leases) GTEST_SKIP() << "no reservations or leases here";
  constexpr int64_t kLease = 400'000;  // Redis keeps its own time: a short real lease
  const Limit limit = Concurrency("conformance_expiry", 2, kLease);
  const std::string kept = internal::NewMeteredId();
  const std::string dropped = internal::NewMeteredId();
  ASSERT_TRUE(Apply(limit, "k", 1, ItemOp::kCheck, kept).allowed);
  ASSERT_TRUE(Apply(limit, "k", 1, ItemOp::kCheck, dropped).allowed);
  ASSERT_FALSE(Apply(limit, "k", 1, ItemOp::kCheck, internal::NewMeteredId()).allowed);
  // Time passes; `kept` is renewed before it expires, `dropped` is not.
  Wait(kLease / 2);
  const Decision renewed = Apply(limit, "k", 1, ItemOp::kRenew, kept);
  ASSERT_TRUE(renewed.allowed);
  EXPECT_GT(renewed.reset_after_micros, kLease / 2);
  Wait(kLease / 2 + kLease / 4);
  // `dropped` expired: its slot is free, and it cannot be renewed or released.
  const Decision expired = Apply(limit, "k", 1, ItemOp::kRenew, dropped);
  EXPECT_FALSE(expired.allowed);
  EXPECT_EQ(expired.reason, DenyReason::kNotFound);
  EXPECT_EQ(CheckOne(limit, "k", 0).remaining, 1);
  EXPECT_TRUE(Apply(limit, "k", 1, ItemOp::kCheck, internal::NewMeteredId()).allowed);
  EXPECT_TRUE(Apply(limit, "k", 1, ItemOp::kRelease, kept).allowed);  // still held
}

// One gateway request: a request of the requests-per-minute limit, a reservation of tokens
// and a concurrency slot, all or nothing in one step. When the slots are taken the others
// are not consumed, and when the tokens are short no slot is taken.
TEST_P(MeteredConformanceTest, RequestsTokensAndASlotAreAllOrNothing) {
  if (!under_test_.reservations_and_leases) GTEST_SKIP() << "no reservations or leases here";
  const Limit requests = Window("conformance_batch_rpm", Algorithm::kFixedWindow, 10, kYear);
  const Limit tokens = TokenBucket("conformance_batch_tpm", 1000, 1e-3);
  const Limit slots = Concurrency("conformance_batch_slots", 1, kYear);
  auto request = [&](int64_t estimate) {
    CheckItem reserve{&tokens, Key("t"), estimate};
    reserve.op = ItemOp::kReserve;
    reserve.id = internal::NewMeteredId();
    CheckItem slot{&slots, Key("t"), 1};
    slot.id = internal::NewMeteredId();
    absl::StatusOr<std::vector<Decision>> decisions =
        store().Apply({CheckItem{&requests, Key("t"), 1}, reserve, slot});
    EXPECT_TRUE(decisions.ok()) << decisions.status();
    bool allowed = decisions.ok();
    for (const Decision& d : decisions.value_or(std::vector<Decision>{})) allowed &= d.allowed;
    return std::make_pair(allowed, slot.id);
  };
  auto [first, lease] = request(400);
  ASSERT_TRUE(first);
  EXPECT_FALSE(request(100).first);  // no slot: nothing else consumed
  EXPECT_EQ(CheckOne(requests, "t", 0).remaining, 9);
  EXPECT_EQ(CheckOne(tokens, "t", 0).remaining, 600);
  ASSERT_TRUE(Apply(slots, "t", 1, ItemOp::kRelease, lease).allowed);
  EXPECT_FALSE(request(700).first);  // tokens short: no slot taken
  EXPECT_EQ(CheckOne(slots, "t", 0).remaining, 1);
  EXPECT_EQ(CheckOne(requests, "t", 0).remaining, 9);
  EXPECT_TRUE(request(600).first);
  EXPECT_EQ(CheckOne(slots, "t", 0).remaining, 0);
}

// Many threads acquiring and releasing one key never hold more than the limit: counted from
// the answers (each admitted lease until its release) and from the store (a peek).
TEST_P(MeteredConformanceTest, ConcurrentAcquiresNeverHoldMoreThanTheLimit) {
  if (!under_test_.reservations_and_leases) GTEST_SKIP() << "no reservations or leases here";
  constexpr int64_t kLimit = 5;
  const Limit limit = Concurrency("conformance_race", kLimit, kYear);
  std::atomic<int> holding{0};
  std::atomic<int> most{0};
  std::atomic<int> granted{0};
  std::atomic<int> over{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 40; ++i) {
        CheckItem acquire{&limit, Key("hot"), 1};
        acquire.id = internal::NewMeteredId();
        absl::StatusOr<std::vector<Decision>> got = store().Apply({acquire});
        if (!got.ok() || !(*got)[0].allowed) continue;
        ++granted;
        const int now_holding = ++holding;
        int seen = most.load();
        while (now_holding > seen && !most.compare_exchange_weak(seen, now_holding)) {
        }
        const Decision peek = CheckOne(limit, "hot", 0);
        if (peek.remaining < 0 || peek.debt > 0) ++over;
        --holding;  // before the release: a slot is never counted free while still held
        CheckItem release = acquire;
        release.op = ItemOp::kRelease;
        absl::StatusOr<std::vector<Decision>> released = store().Apply({release});
        if (!released.ok() || !(*released)[0].allowed) ++over;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_LE(most.load(), kLimit);
  EXPECT_GT(granted.load(), 40);
  EXPECT_EQ(over.load(), 0);
  EXPECT_EQ(CheckOne(limit, "hot", 0).remaining, kLimit);
}

}  // namespace
}  // namespace tollgate

#endif  // TOLLGATE_TESTS_METERED_CONFORMANCE_H_
