// Copyright tollgate authors. Concurrency leases across a fleet (issue 28): eight `tollgate
// serve` on one Redis and 64 clients never hold more leases of one key than its limit, counted
// from the answers and from the store; and a holder killed with SIGKILL (its leases never
// released) gets its slots back within the lease time.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "boost/beast/http.hpp"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "src/store/redis/redis_store_impl.h"
#include "tests/support/redis_server.h"
#include "tests/support/redis_stores.h"
#include "tests/support/serve_process.h"
#include "tollgate/limiter.h"
#include "tollgate/redis_store.h"

namespace tollgate {
namespace {

namespace http = boost::beast::http;
using Client = ::tollgate::testing::HttpTestClient;
using Server = ::tollgate::testing::ServeProcess;

constexpr char kConfig[] = R"(limits:
  in_flight: {algorithm: concurrency, limit: 5, lease: 1m, timeout: 2s}
)";

nlohmann::json Json(const std::string& body) { return nlohmann::json::parse(body, nullptr, false); }

// The leases Redis holds for `key` of in_flight (expired ones included: an upper bound).
int64_t StoredLeases(redis::Router& redis, const std::string& key) {
  absl::StatusOr<redis::RedisReply> card =
      redis.Command({"ZCARD", absl::StrCat("tollgate:in_flight:{", key, "}:l")});
  return card.ok() ? card->integer : -1;
}

TEST(LeaseFleetTest, EightServersAndSixtyFourClientsNeverHoldMoreThanTheLimit) {
  auto redis = tollgate::testing::RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status();
  std::vector<std::unique_ptr<Server>> fleet;
  for (int i = 0; i < 8; ++i) {
    fleet.push_back(Server::Start(kConfig, {"--redis", (*redis)->url()}));
    ASSERT_NE(fleet.back(), nullptr);
  }
  absl::StatusOr<std::unique_ptr<RedisStore>> store =
      testing::ConnectRedisStore({.url = (*redis)->url()});
  ASSERT_TRUE(store.ok()) << store.status();
  redis::Router& inspect = static_cast<redis::RedisStoreImpl&>(**store).client();

  std::atomic<int> holding{0};
  std::atomic<int> most_held{0};
  std::atomic<int64_t> most_stored{0};
  std::atomic<int> granted{0};
  std::atomic<int> refused{0};
  std::atomic<int> errors{0};
  std::atomic<bool> done{false};
  std::thread monitor([&] {
    while (!done.load()) {
      const int64_t stored = StoredLeases(inspect, "model:a");
      int64_t seen = most_stored.load();
      while (stored > seen && !most_stored.compare_exchange_weak(seen, stored)) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  std::vector<std::thread> clients;
  for (int c = 0; c < 64; ++c) {
    clients.emplace_back([&, c] {
      Client client(fleet[c % fleet.size()]->port());
      for (int i = 0; i < 6; ++i) {
        auto acquired = client.Send(http::verb::post, "/v1/acquire",
                                    R"({"limit":"in_flight","key":"model:a"})");
        if (!acquired.has_value()) {
          ++errors;
          return;
        }
        if (acquired->result_int() == 429) {
          ++refused;
          continue;
        }
        if (acquired->result_int() != 200) {
          ++errors;
          continue;
        }
        ++granted;
        const int now = ++holding;
        int seen = most_held.load();
        while (now > seen && !most_held.compare_exchange_weak(seen, now)) {
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        --holding;  // before the release: never counted free while held
        const std::string lease = Json(acquired->body())["lease"].get<std::string>();
        auto released = client.Send(
            http::verb::post, "/v1/release",
            absl::StrCat(R"({"limit":"in_flight","key":"model:a","lease":")", lease, R"("})"));
        if (!released.has_value() || released->result_int() != 200 ||
            Json(released->body())["released"] != true) {
          ++errors;
        }
      }
    });
  }
  for (std::thread& client : clients) client.join();
  done = true;
  monitor.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_LE(most_held.load(), 5);
  EXPECT_LE(most_stored.load(), 5);
  EXPECT_GT(granted.load(), 20);
  EXPECT_GT(refused.load(), 0);                    // the limit was reached
  EXPECT_EQ(StoredLeases(inspect, "model:a"), 0);  // all released
  for (auto& server : fleet) EXPECT_EQ(server->Stop(), 0) << server->log();
}

// A holder linking the library takes every slot with RAII leases and is killed with SIGKILL:
// no destructor runs, nothing is released. The slots stay taken until the lease time has
// passed since they were taken, then come back.
TEST(LeaseFleetTest, ASigkilledHoldersSlotsComeBackWithinTheLeaseTime) {
  auto redis = tollgate::testing::RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status();
  constexpr int64_t kLeaseMicros = 1'500'000;
  Limit limit;
  limit.name = "in_flight";
  limit.numbers.algorithm = Algorithm::kConcurrency;
  limit.numbers.limit = 5;
  limit.numbers.window_micros = kLeaseMicros;
  limit.timeout_micros = 2'000'000;

  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t holder = fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {  // the holder
    close(ready[0]);
    auto store = testing::ConnectRedisStore({.url = (*redis)->url()});
    if (!store.ok()) _exit(2);
    auto limiter = Limiter::Create({.limits = {limit}, .store = std::move(*store)});
    if (!limiter.ok()) _exit(3);
    std::vector<Lease> leases;
    for (int i = 0; i < 5; ++i) {
      absl::StatusOr<Lease> lease = (*limiter)->Acquire("in_flight", "gpu:0");
      if (!lease.ok() || !lease->held()) _exit(4);
      leases.push_back(*std::move(lease));
    }
    const char byte = 'x';
    if (write(ready[1], &byte, 1) != 1) _exit(5);
    raise(SIGKILL);
    _exit(6);  // not reached
  }
  close(ready[1]);
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1) << "the holder did not take its leases";
  close(ready[0]);
  int status = 0;
  ASSERT_EQ(waitpid(holder, &status, 0), holder);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  auto store = testing::ConnectRedisStore({.url = (*redis)->url()});
  ASSERT_TRUE(store.ok()) << store.status();
  auto limiter = Limiter::Create({.limits = {limit}, .store = std::move(*store)});
  ASSERT_TRUE(limiter.ok()) << limiter.status();
  absl::StatusOr<Lease> blocked = (*limiter)->Acquire("in_flight", "gpu:0");
  ASSERT_TRUE(blocked.ok()) << blocked.status();
  EXPECT_FALSE(blocked->held()) << "the dead holder's slots are still held";
  EXPECT_GT(blocked->decision().retry_after_micros, 0);
  // The store says when the slots come back: every one within the lease time.
  EXPECT_LE(blocked->decision().retry_after_micros, kLeaseMicros);
  EXPECT_LE(blocked->decision().reset_after_micros, kLeaseMicros);
  // And they do: once that time has passed (on Redis's clock, which this one follows), all
  // five are free.
  std::this_thread::sleep_for(std::chrono::microseconds(blocked->decision().reset_after_micros) +
                              std::chrono::milliseconds(50));
  absl::StatusOr<Decision> peek = (*limiter)->Check("in_flight", "gpu:0", 0);
  ASSERT_TRUE(peek.ok()) << peek.status();
  EXPECT_EQ(peek->remaining, 5);
  absl::StatusOr<Lease> again = (*limiter)->Acquire("in_flight", "gpu:0");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->held());
}

}  // namespace
}  // namespace tollgate
