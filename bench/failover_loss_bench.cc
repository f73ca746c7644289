// Copyright tollgate authors. What a Redis failover lets a limit over-admit (docs/redis.md, "What
// a failover loses"): admissions beyond the limit across a SIGKILL of the primary under load.
//
// Each row starts a primary, a replica whose replication link goes through a FaultProxy (in this
// process), and a Sentinel (quorum 1, down-after-milliseconds 1000), all on loopback. 16 callers
// check a token bucket of 5 (refilling once in months) through the library's RedisStore on the
// Sentinel URL, as fast as they are answered, on key after key: request n asks for key n / 6, so
// every key gets 6 requests, 5 admitted, and the load is always admitting. After 2 s the link's
// fault is set (none, a delay, or a black hole), and some time later the primary is SIGKILLed; the
// load goes on until 1 s after the promoted replica's first answer. Then every key
// asked for is asked 6 more times (of the same limit, not durable, so the promoted primary's
// count decides): a count the replica never received is admitted again. "Beyond the limit" is the
// sum over keys of max(0, admitted - 5).
//
// Rows: a healthy replica; one that falls behind for 1 s before the kill (the proxy forwards
// one read of at most 16 KB per 100 ms, far less than the load's replication stream); one cut
// off 5 s before the kill, with the primary's min-replicas-to-write 0 (the default) and with
// min-replicas-to-write 1 / min-replicas-max-lag 1 (the bound); and the lagging and cut-off
// replicas with the limit durable (timeout 1 s), whose admissions wait for the replica.
//
//   build/bench/failover_loss_bench        (about 2 minutes; TOLLGATE_BENCH_QUICK=1: 3 rows)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "bench/bench_options.h"
#include "bench/replicated_redis.h"
#include "tests/support/fault_proxy.h"
#include "tollgate/redis_store.h"

namespace tollgate::bench {
namespace {

using SteadyClock = std::chrono::steady_clock;
using testing::FaultProxy;

constexpr int64_t kLimit = 5;
constexpr int64_t kRequestsPerKey = kLimit + 1;
constexpr int kCallers = 16;

struct Setting {
  const char* name;
  FaultProxy::Fault fault;
  int delay_ms;
  double cut_before_kill_s;  // when the fault starts, before the kill
  bool bounded;              // min-replicas-to-write 1, min-replicas-max-lag 1
  bool durable;
};

// A primary, its replica through a FaultProxy, a Sentinel.
struct ReplicatedSet {
  std::unique_ptr<RedisProcess> primary;
  std::unique_ptr<FaultProxy> link;
  std::unique_ptr<RedisProcess> replica;
  std::unique_ptr<RedisProcess> sentinel;
  std::string dir;
  ~ReplicatedSet() {
    sentinel.reset();
    replica.reset();
    primary.reset();
    link.reset();
    if (!dir.empty()) std::system(absl::StrCat("rm -rf '", dir, "'").c_str());
  }
};

std::unique_ptr<ReplicatedSet> StartSet(bool bounded) {
  auto set = std::make_unique<ReplicatedSet>();
  std::vector<std::string> bound;
  if (bounded) bound = {"--min-replicas-to-write", "1", "--min-replicas-max-lag", "1"};
  set->primary = StartRedis(bound);
  set->link = std::make_unique<FaultProxy>(set->primary->port());
  set->replica = StartRedis({"--replicaof", "127.0.0.1", std::to_string(set->link->port())});
  if (!WaitReplicas(set->primary->port(), 1)) return nullptr;
  char dir_template[] = "/tmp/tollgate-failover-XXXXXX";
  set->dir = mkdtemp(dir_template);
  const int sentinel_port = FreeLoopbackPort();
  const std::string config = set->dir + "/sentinel.conf";
  {
    std::ofstream out(config);
    out << "port " << sentinel_port << "\nbind 127.0.0.1\ndir " << set->dir
        << "\nsentinel monitor limits 127.0.0.1 " << set->primary->port()
        << " 1\nsentinel down-after-milliseconds limits 1000\n"
           "sentinel failover-timeout limits 10000\n";
  }
  set->sentinel =
      std::make_unique<RedisProcess>(sentinel_port, std::vector<std::string>{config, "--sentinel"});
  const std::string replica_port = std::to_string(set->replica->port());
  if (!WaitFor(
          [&] {
            const std::string replicas =
                RedisCli(sentinel_port, {"SENTINEL", "replicas", "limits"});
            return absl::StrContains(replicas, replica_port) &&
                   !absl::StrContains(replicas, "disconnected");
          },
          std::chrono::seconds(30))) {
    return nullptr;
  }
  return set;
}

// Closed-loop chains of checks, request n on key n / kRequestsPerKey (phase A), or every key of
// a list kRequestsPerKey times (phase B). Counts what each key was admitted.
class Load {
 public:
  Load(RedisStore& store, std::vector<std::atomic<int64_t>>& admitted)
      : store_(store), admitted_(admitted), retry_thread_([this] { Retry(); }) {}
  ~Load() {
    {
      absl::MutexLock lock(&retry_mu_);
      retry_stop_ = true;
    }
    retry_thread_.join();
  }

  void Start(const Limit& limit, int64_t requests) {
    limit_ = &limit;
    requests_ = requests;
    next_.store(0);
    running_.store(kCallers);
    done_ = std::make_unique<absl::Notification>();
    for (int caller = 0; caller < kCallers; ++caller) Next();
  }
  void Stop() { stop_.store(true); }
  void Wait() { done_->WaitForNotification(); }

  int64_t errors() const { return errors_.load(); }
  int64_t unconfirmed() const { return unconfirmed_.load(); }
  int64_t answered() const { return answered_.load(); }
  // Keys asked for so far.
  int64_t keys() const { return std::min(next_.load(), requests_) / kRequestsPerKey + 1; }

 private:
  void Next() {
    const int64_t n = next_.fetch_add(1);
    if (stop_.load() || n >= requests_) {
      if (running_.fetch_sub(1) == 1) done_->Notify();
      return;
    }
    const int64_t key = n / kRequestsPerKey;
    store_.ApplyAsync({{limit_, absl::StrCat("k:", key)}},
                      [this, key](const absl::StatusOr<std::vector<Decision>>& answer) {
                        if (IsUnconfirmedWrite(answer.status())) {
                          // Answered by the store (a durable check no replica confirmed).
                          ++unconfirmed_;
                          ++answered_;
                          Next();
                          return;
                        }
                        if (!answer.ok()) {
                          // A store that fails fast while the primary is gone answers
                          // inline: the chain goes on from the retry thread, a moment later.
                          ++errors_;
                          absl::MutexLock lock(&retry_mu_);
                          ++retries_;
                          return;
                        }
                        ++answered_;
                        if ((*answer)[0].allowed) ++admitted_[key];
                        Next();
                      });
  }

  // Resumes the chains whose check failed, 1 ms later.
  void Retry() {
    while (true) {
      int resume = 0;
      {
        absl::MutexLock lock(&retry_mu_);
        retry_mu_.Await(absl::Condition(
            +[](Load* load) { return load->retries_ > 0 || load->retry_stop_; }, this));
        if (retry_stop_) return;
        resume = std::exchange(retries_, 0);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      for (int i = 0; i < resume; ++i) Next();
    }
  }

  RedisStore& store_;
  std::vector<std::atomic<int64_t>>& admitted_;
  const Limit* limit_ = nullptr;
  int64_t requests_ = 0;
  std::atomic<int64_t> next_{0};
  std::atomic<bool> stop_{false};
  std::atomic<int> running_{0};
  std::atomic<int64_t> errors_{0};
  std::atomic<int64_t> unconfirmed_{0};
  std::atomic<int64_t> answered_{0};
  std::unique_ptr<absl::Notification> done_;
  absl::Mutex retry_mu_;
  int retries_ ABSL_GUARDED_BY(retry_mu_) = 0;
  bool retry_stop_ ABSL_GUARDED_BY(retry_mu_) = false;
  std::thread retry_thread_;  // last: started once the members above exist
};

Limit Bucket(bool durable) {
  Limit limit;
  limit.name = "otp";
  limit.numbers = {
      .algorithm = Algorithm::kTokenBucket, .capacity = kLimit, .refill_per_second = 1e-6};
  limit.timeout_micros = 1'000'000;
  limit.durable = durable;
  return limit;
}

void RunRow(const Setting& setting) {
  std::unique_ptr<ReplicatedSet> set = StartSet(setting.bounded);
  if (set == nullptr) {
    std::printf("| %s | (the Redis processes did not start) |\n", setting.name);
    return;
  }
  RedisConnectionsOptions connection;
  connection.url = absl::StrCat("redis-sentinel://127.0.0.1:", set->sentinel->port(), "/limits");
  connection.refresh_interval_ms = 200;
  absl::StatusOr<std::shared_ptr<RedisConnections>> connections =
      RedisConnections::Connect(connection);
  absl::StatusOr<std::unique_ptr<RedisStore>> store =
      connections.ok() ? RedisStore::Create({.redis = *connections})
                       : absl::StatusOr<std::unique_ptr<RedisStore>>(connections.status());
  if (!store.ok()) {
    std::printf("| %s | %s |\n", setting.name, store.status().ToString().c_str());
    return;
  }
  constexpr int64_t kMaxRequests = 12'000'000;
  std::vector<std::atomic<int64_t>> admitted(kMaxRequests / kRequestsPerKey + 1);
  const Limit limit = Bucket(setting.durable);
  const Limit plain = Bucket(false);

  Load load(**store, admitted);
  load.Start(limit, kMaxRequests);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  set->link->set_fault(setting.fault, setting.delay_ms);
  std::this_thread::sleep_for(
      std::chrono::milliseconds(static_cast<int64_t>(setting.cut_before_kill_s * 1000)));
  const int64_t answered_before_kill = load.answered();
  const SteadyClock::time_point killed = SteadyClock::now();
  set->primary->Kill();
  // Until the promoted replica has answered for 1 s.
  const int promoted_port = set->replica->port();
  WaitFor(
      [&] {
        return absl::StrContains(
            RedisCli(set->sentinel->port(), {"SENTINEL", "get-master-addr-by-name", "limits"}),
            std::to_string(promoted_port));
      },
      std::chrono::seconds(60));
  // The outage: from the kill to the first answer of the promoted primary (a durable check's
  // refusal, unconfirmed, included); the load then goes on for 1 s.
  const int64_t answered = load.answered();
  WaitFor([&] { return load.answered() > answered; }, std::chrono::seconds(60));
  const double outage_s = std::chrono::duration<double>(SteadyClock::now() - killed).count();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  load.Stop();
  load.Wait();
  const int64_t keys = load.keys();
  int64_t admitted_a = 0;
  for (int64_t key = 0; key < keys; ++key) admitted_a += admitted[key].load();

  // Phase B: every key asked for, kRequestsPerKey more times, of the limit as the promoted
  // primary counts it.
  Load again(**store, admitted);
  again.Start(plain, keys * kRequestsPerKey);
  again.Wait();
  int64_t beyond = 0;
  int64_t keys_beyond = 0;
  for (int64_t key = 0; key < keys; ++key) {
    const int64_t over = admitted[key].load() - kLimit;
    if (over > 0) {
      beyond += over;
      ++keys_beyond;
    }
  }
  std::printf("| %s | %lld | %lld | %lld | %.1f | %lld | %lld | %lld | %.2f |\n", setting.name,
              static_cast<long long>(admitted_a), static_cast<long long>(answered_before_kill),
              static_cast<long long>(load.unconfirmed()), outage_s,
              static_cast<long long>(load.errors()) + static_cast<long long>(again.errors()),
              static_cast<long long>(beyond), static_cast<long long>(keys_beyond),
              admitted_a > 0
                  ? 1000.0 * static_cast<double>(beyond) / static_cast<double>(admitted_a)
                  : 0.0);
  std::fflush(stdout);
  store->reset();
}

int Main() {
  const std::vector<Setting> all = {
      {"healthy replica", FaultProxy::Fault::kPass, 0, 1.0, false, false},
      {"falling behind for 1 s (16 KB per 100 ms)", FaultProxy::Fault::kDelay, 100, 1.0, false,
       false},
      {"replica cut off 5 s before the kill", FaultProxy::Fault::kBlackHole, 0, 5.0, false, false},
      {"cut off 5 s, min-replicas-to-write 1, max-lag 1", FaultProxy::Fault::kBlackHole, 0, 5.0,
       true, false},
      {"durable, falling behind for 1 s", FaultProxy::Fault::kDelay, 100, 1.0, false, true},
      {"durable, replica cut off 5 s before the kill", FaultProxy::Fault::kBlackHole, 0, 5.0, false,
       true},
  };
  std::printf(
      "Token bucket of %lld per key; %d callers; request n asks for key n / %lld; Sentinel "
      "down-after-milliseconds 1000.\n\n",
      static_cast<long long>(kLimit), kCallers, static_cast<long long>(kRequestsPerKey));
  std::printf(
      "| replica | admitted under load | answers before the kill | refused unconfirmed | "
      "outage s | errors | admissions beyond the limit | keys over | beyond per 1000 "
      "admitted |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (size_t i = 0; i < all.size(); ++i) {
    if (Quick() && i != 0 && i != 2 && i != 5) continue;
    RunRow(all[i]);
  }
  return 0;
}

}  // namespace
}  // namespace tollgate::bench

int main() { return tollgate::bench::Main(); }
