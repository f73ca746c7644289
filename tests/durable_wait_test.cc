// Copyright tollgate authors. A durable limit's answer waits for a replica (docs/redis.md,
// "Durable limits"): a real primary and a replica whose replication link goes through a
// FaultProxy. Black-holing the link holds the replica's acknowledgements: the check's WAIT
// stays blocked on the primary (CLIENT LIST shows it) and its answer does not come; lifting
// the fault lets the WAIT return and the answer with it; leaving it makes the check a store
// failure that its fail_closed policy answers, while other limits are still decided by Redis.
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/store/redis/redis_store_impl.h"
#include "tests/support/limits.h"
#include "tests/support/process.h"
#include "tests/support/proxied_replication.h"
#include "tests/support/redis_cluster.h"
#include "tests/support/redis_stores.h"
#include "tollgate/fleet.h"
#include "tollgate/redis_store.h"
#include "tollgate/resilience.h"

namespace tollgate {
namespace {

using ::testing::HasSubstr;
using ::tollgate::testing::FaultProxy;
using ::tollgate::testing::RedisCommand;

constexpr char kPhone[] = "+919800000000";

// The OTP limit of a test, returned clear of a window's edge: its counts stay in one window
// for the test's run.
Limit Otp(int64_t limit, int64_t timeout_micros) {
  testing::WaitClearOfWindowEdge(600'000'000, 30'000'000);
  Limit otp;
  otp.name = "otp_per_phone";
  otp.numbers = {
      .algorithm = Algorithm::kFixedWindow, .limit = limit, .window_micros = 600'000'000};
  otp.on_store_failure = FailureMode::kFailClosed;
  otp.timeout_micros = timeout_micros;
  otp.durable = true;
  return otp;
}

// Waits (bounded) until `condition` holds.
template <typename Condition>
bool Eventually(Condition condition, std::chrono::seconds within = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return condition();
}

// Whether a client of the Redis on `port` is blocked in WAIT now.
bool BlockedInWait(int port) {
  absl::StatusOr<redis::RedisReply> clients = RedisCommand(port, {"CLIENT", "LIST"});
  if (!clients.ok()) return false;
  for (absl::string_view line : absl::StrSplit(clients->str, '\n')) {
    if (absl::StrContains(line, "cmd=wait") && absl::StrContains(line, "flags=b")) return true;
  }
  return false;
}

// The count the primary holds for the phone in the current window (0 when none).
int64_t CountOnPrimary(int port) {
  absl::StatusOr<redis::RedisReply> keys =
      RedisCommand(port, {"KEYS", absl::StrCat("tollgate:otp_per_phone:{", kPhone, "}:*")});
  if (!keys.ok() || keys->elements.empty()) return 0;
  absl::StatusOr<redis::RedisReply> value = RedisCommand(port, {"GET", keys->elements[0].str});
  int64_t count = 0;
  return value.ok() && absl::SimpleAtoi(value->str, &count) ? count : -1;
}

// One asynchronous call's answer.
struct Answer {
  absl::Notification done;
  absl::StatusOr<std::vector<Decision>> decisions = absl::UnknownError("unanswered");
  CheckCallback Callback() {
    return [this](absl::StatusOr<std::vector<Decision>> result) {
      decisions = std::move(result);
      done.Notify();
    };
  }
};

class DurableWaitTest : public ::tollgate::testing::ProxiedReplicationTest {
 protected:
  int primary() const { return set_->port(0); }
  std::string url() const { return absl::StrCat("redis://127.0.0.1:", primary()); }

  std::unique_ptr<RedisStore> Store(ResilienceEventCallback on_event = nullptr) {
    absl::StatusOr<std::unique_ptr<RedisStore>> store =
        testing::ConnectRedisStore({.url = url()}, {.on_event = std::move(on_event)});
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }
};

TEST_F(DurableWaitTest, AnAdmissionIsAnsweredOnlyOnceAReplicaHoldsIt) {
  std::unique_ptr<RedisStore> store = Store();
  ASSERT_NE(store, nullptr);
  const Limit otp = Otp(3, 30'000'000);
  EXPECT_TRUE(store->Durable(otp));

  absl::StatusOr<std::vector<Decision>> first = store->Apply({{&otp, kPhone}});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE((*first)[0].allowed);
  EXPECT_EQ(store->durable_waits().calls_confirmed, 1);

  // The replica's acknowledgements held: the check is written, its WAIT blocks, and the
  // answer does not come.
  link().set_fault(FaultProxy::Fault::kBlackHole);
  Answer answer;
  store->ApplyAsync({{&otp, kPhone}}, answer.Callback());
  ASSERT_TRUE(Eventually([&] { return BlockedInWait(primary()); }));
  EXPECT_EQ(CountOnPrimary(primary()), 2);
  EXPECT_FALSE(answer.done.HasBeenNotified());

  // Let through: the replica receives the write and acknowledges it; WAIT returns, and only
  // then the answer.
  link().set_fault(FaultProxy::Fault::kPass);
  answer.done.WaitForNotification();
  ASSERT_TRUE(answer.decisions.ok()) << answer.decisions.status();
  EXPECT_TRUE((*answer.decisions)[0].allowed);
  EXPECT_EQ((*answer.decisions)[0].source, DecisionSource::kRedis);
  const DurableWaitStats stats = store->durable_waits();
  EXPECT_EQ(stats.calls_confirmed, 2);
  EXPECT_EQ(stats.calls_unconfirmed, 0);
  EXPECT_GE(stats.waits, 2);
  EXPECT_EQ(stats.wait_latency.count, stats.waits);
}

TEST_F(DurableWaitTest, NoReplicaInTimeIsAStoreFailureAndTheCountStaysSpent) {
  std::mutex mutex;
  std::vector<ResilienceEvent::Kind> events;
  std::unique_ptr<RedisStore> store = Store([&](const ResilienceEvent& event) {
    std::lock_guard<std::mutex> lock(mutex);
    events.push_back(event.kind);
  });
  ASSERT_NE(store, nullptr);
  const Limit otp = Otp(3, 2'000'000);

  link().set_fault(FaultProxy::Fault::kBlackHole);
  Answer answer;
  store->ApplyAsync({{&otp, kPhone}}, answer.Callback());
  ASSERT_TRUE(Eventually([&] { return BlockedInWait(primary()); }));
  EXPECT_FALSE(answer.done.HasBeenNotified());
  answer.done.WaitForNotification();  // the WAIT's timeout: what is left of 2 s, less a fifth
  EXPECT_TRUE(IsUnconfirmedWrite(answer.decisions.status())) << answer.decisions.status();
  EXPECT_THAT(std::string(answer.decisions.status().message()),
              HasSubstr("no replica of Redis at"));
  // Spent on the primary: a refusal after a timeout is conservative, never an over-admission.
  EXPECT_EQ(CountOnPrimary(primary()), 1);
  EXPECT_EQ(store->durable_waits().calls_unconfirmed, 1);
  // Answered at its own time; the WAIT, which Redis times out at its next turn, after.
  EXPECT_TRUE(Eventually([&] { return store->durable_waits().wait_timeouts == 1; }));

  // Once the replica confirms again, so does the log.
  link().set_fault(FaultProxy::Fault::kPass);
  absl::StatusOr<std::vector<Decision>> after = store->Apply({{&otp, kPhone}});
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE((*after)[0].allowed);
  std::lock_guard<std::mutex> lock(mutex);
  EXPECT_THAT(events, ::testing::ElementsAre(ResilienceEvent::Kind::kReplicasNotConfirming,
                                             ResilienceEvent::Kind::kReplicasConfirming));
}

TEST_F(DurableWaitTest, ARefusalWroteNothingAndIsAnsweredWithoutWaiting) {
  std::unique_ptr<RedisStore> store = Store();
  ASSERT_NE(store, nullptr);
  const Limit otp = Otp(1, 30'000'000);
  ASSERT_TRUE(store->Apply({{&otp, kPhone}}).ok());

  link().set_fault(FaultProxy::Fault::kBlackHole);
  absl::StatusOr<std::vector<Decision>> refused = store->Apply({{&otp, kPhone}});
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_FALSE((*refused)[0].allowed);
  EXPECT_EQ((*refused)[0].reason, DenyReason::kOverLimit);
  // Answered while the WAIT sent after it is still blocked.
  EXPECT_TRUE(BlockedInWait(primary()));
  link().set_fault(FaultProxy::Fault::kPass);
}

TEST_F(DurableWaitTest, InOneFlushOnlyTheDurableRequestsThatWroteWaitForTheReplica) {
  std::unique_ptr<RedisStore> store = Store();
  ASSERT_NE(store, nullptr);
  auto& impl = static_cast<redis::RedisStoreImpl&>(*store);
  const Limit otp = Otp(1, 2'000'000);
  Limit api;
  api.name = "api_per_user";
  api.numbers = {.algorithm = Algorithm::kTokenBucket, .capacity = 100, .refill_per_second = 10};
  constexpr char kSpentPhone[] = "+919800000001";
  ASSERT_TRUE(store->Apply({{&otp, kSpentPhone}}).ok());

  link().set_fault(FaultProxy::Fault::kBlackHole);
  // Made on the I/O thread outside its handlers, the three join one flush: the durable ones
  // go in one call with its WAIT after it, the other in a call of its own.
  Answer admitted;
  Answer refused;
  Answer other;
  impl.client().Post([&] {
    impl.ApplyAsync({{&otp, kPhone}}, admitted.Callback());
    impl.ApplyAsync({{&otp, kSpentPhone}}, refused.Callback());
    impl.ApplyAsync({{&api, "user:42"}}, other.Callback());
  });
  other.done.WaitForNotification();
  ASSERT_TRUE(other.decisions.ok()) << other.decisions.status();
  EXPECT_TRUE((*other.decisions)[0].allowed);
  ASSERT_TRUE(Eventually([&] { return BlockedInWait(primary()); }));
  EXPECT_FALSE(admitted.done.HasBeenNotified());
  EXPECT_FALSE(refused.done.HasBeenNotified());

  // No replica in time: the admission is a store failure, its count spent on the primary; the
  // refusal, which wrote nothing, is still a refusal.
  admitted.done.WaitForNotification();
  EXPECT_TRUE(IsUnconfirmedWrite(admitted.decisions.status())) << admitted.decisions.status();
  EXPECT_EQ(CountOnPrimary(primary()), 1);
  refused.done.WaitForNotification();
  ASSERT_TRUE(refused.decisions.ok()) << refused.decisions.status();
  EXPECT_FALSE((*refused.decisions)[0].allowed);
  EXPECT_EQ((*refused.decisions)[0].reason, DenyReason::kOverLimit);
  // One call held for both.
  EXPECT_EQ(store->durable_waits().calls_unconfirmed, 1);
  link().set_fault(FaultProxy::Fault::kPass);
}

TEST_F(DurableWaitTest, LeasesAndReservationsOfADurableLimitWaitToo) {
  std::unique_ptr<RedisStore> store = Store();
  ASSERT_NE(store, nullptr);
  Limit slots;
  slots.name = "llm_in_flight";
  slots.numbers = {.algorithm = Algorithm::kConcurrency, .limit = 5, .window_micros = 60'000'000};
  slots.timeout_micros = 300'000;
  slots.durable = true;
  const Limit otp = Otp(3, 300'000);
  CheckItem lease{&slots, "user:42"};
  lease.id = "lease-1";
  CheckItem reservation{&otp, kPhone};
  reservation.op = ItemOp::kReserve;
  reservation.id = "reservation-1";

  for (const CheckItem& item : {lease, reservation}) {
    absl::StatusOr<std::vector<Decision>> confirmed = store->Apply({item});
    ASSERT_TRUE(confirmed.ok()) << item.limit->name << ": " << confirmed.status();
    EXPECT_TRUE((*confirmed)[0].allowed);
  }
  EXPECT_EQ(store->durable_waits().calls_confirmed, 2);

  link().set_fault(FaultProxy::Fault::kBlackHole);
  lease.id = "lease-2";
  reservation.id = "reservation-2";
  for (const CheckItem& item : {lease, reservation}) {
    absl::StatusOr<std::vector<Decision>> held = store->Apply({item});
    EXPECT_TRUE(IsUnconfirmedWrite(held.status())) << item.limit->name << ": " << held.status();
    // Its WAIT returned before the next is sent, so that the next is written too.
    EXPECT_TRUE(Eventually([&] { return !BlockedInWait(primary()); }));
  }
  EXPECT_EQ(store->durable_waits().calls_unconfirmed, 2);
  link().set_fault(FaultProxy::Fault::kPass);
}

TEST_F(DurableWaitTest, ThePolicyAnswersTheDurableLimitAndRedisTheOthers) {
  std::unique_ptr<RedisStore> redis = Store();
  ASSERT_NE(redis, nullptr);
  absl::StatusOr<std::unique_ptr<ResilientStore>> resilient =
      ResilientStore::Create(std::shared_ptr<tollgate::Store>(std::move(redis)));
  ASSERT_TRUE(resilient.ok()) << resilient.status();
  ResilientStore& store = **resilient;
  const Limit otp = Otp(3, 300'000);
  Limit api;
  api.name = "api_per_user";
  api.numbers = {.algorithm = Algorithm::kTokenBucket, .capacity = 100, .refill_per_second = 10};
  api.timeout_micros = 300'000;

  link().set_fault(FaultProxy::Fault::kBlackHole);
  // More than the breaker's threshold of store failures (5), had they counted as such. Each
  // is refused: by the policy (503) when written but not confirmed (or when its time went
  // waiting behind the WAIT before it), by Redis once three are spent on the primary.
  for (int i = 0; i < 8; ++i) {
    absl::StatusOr<std::vector<Decision>> refused = store.Apply({{&otp, kPhone}});
    ASSERT_TRUE(refused.ok()) << refused.status();
    EXPECT_FALSE((*refused)[0].allowed);
    const bool by_policy = (*refused)[0].reason == DenyReason::kStoreUnavailable;
    EXPECT_TRUE(by_policy || (*refused)[0].reason == DenyReason::kOverLimit);
    EXPECT_EQ((*refused)[0].source, by_policy ? DecisionSource::kFallback : DecisionSource::kRedis);
    EXPECT_GT((*refused)[0].retry_after_micros, 0);
  }
  EXPECT_EQ(store.circuit_state(), CircuitState::kClosed);
  // While a durable check's WAIT is blocked, another limit is decided by Redis.
  const Limit other_phone = Otp(3, 300'000);
  Answer waiting;
  store.ApplyAsync({{&other_phone, "+919800000001"}}, waiting.Callback());
  ASSERT_TRUE(Eventually([&] { return BlockedInWait(primary()); }));
  absl::StatusOr<std::vector<Decision>> other = store.Apply({{&api, "user:42"}});
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_TRUE((*other)[0].allowed);
  EXPECT_EQ((*other)[0].source, DecisionSource::kRedis);
  EXPECT_FALSE(waiting.done.HasBeenNotified());
  waiting.done.WaitForNotification();
  ASSERT_TRUE(waiting.decisions.ok());
  EXPECT_EQ((*waiting.decisions)[0].reason, DenyReason::kStoreUnavailable);
  EXPECT_EQ(store.stats().store_errors, 0);
  EXPECT_EQ(store.stats().deadlines_missed, 0);
  // What was written stays spent on the primary, never beyond the limit.
  const int64_t spent = CountOnPrimary(primary());
  EXPECT_GE(spent, 1);
  EXPECT_LE(spent, 3);
  link().set_fault(FaultProxy::Fault::kPass);
}

TEST(DurableStartTest, DurableTrueOnARedisWithoutReplicaIsRefusedAtStart) {
  absl::StatusOr<std::unique_ptr<testing::RedisServer>> alone = testing::RedisServer::Start();
  ASSERT_TRUE(alone.ok()) << alone.status();
  const std::string alone_url = absl::StrCat("redis://127.0.0.1:", (*alone)->port());
  FleetOptions options;
  options.limits = {Otp(3, 200'000)};
  options.redis.url = alone_url;
  options.instances = 1;
  absl::StatusOr<std::unique_ptr<Fleet>> fleet = Fleet::Connect(options);
  ASSERT_FALSE(fleet.ok());
  EXPECT_EQ(fleet.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(fleet.status().message()),
              HasSubstr("limit 'otp_per_phone' says durable: true"));

  // tollgate serve says where the file asks for it.
  const std::string dir = testing::MakeTempDir("tollgate-durable");
  const std::string config = dir + "/limits.yaml";
  testing::WriteFile(config, R"(limits:
  otp_per_phone:
    algorithm: fixed_window
    limit: 3
    window: 10m
    on_store_failure: fail_closed
    durable: true
)");
  absl::StatusOr<std::string> served =
      testing::RunCommand({TOLLGATE_BINARY, "serve", "--config", config, "--redis", alone_url,
                           "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"});
  ASSERT_FALSE(served.ok());
  EXPECT_THAT(std::string(served.status().message()),
              HasSubstr(absl::StrCat(config,
                                     ":7:14: limits.otp_per_phone.durable: limit "
                                     "'otp_per_phone' says durable: true")));

  // The same limit left to the default: on a Redis without a replica it is not durable.
  Limit defaulted = Otp(3, 200'000);
  defaulted.durable = std::nullopt;
  options.limits = {defaulted};
  fleet = Fleet::Connect(options);
  ASSERT_TRUE(fleet.ok()) << fleet.status();
  EXPECT_FALSE((*fleet)->redis_store()->Durable(defaulted));
  absl::StatusOr<Decision> admitted = (*fleet)->limiter().Check("otp_per_phone", kPhone);
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_TRUE(admitted->allowed);
}

}  // namespace
}  // namespace tollgate
