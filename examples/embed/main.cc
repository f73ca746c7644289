// A program that limits itself with the production stack, built in one call: 5 requests a
// second per user, burst of 10.
//
//   embed                          # the limits in this process's memory, on a frozen clock
//   embed redis://127.0.0.1:6379   # the limits in Redis, shared by every process that uses it
//
// In memory it prints how many of 100 back-to-back attempts were allowed (the burst: 10),
// then how many one second later (the refill: 5), and exits 0 when that matches the limit.
// On Redis, where time is Redis' own, it prints how many of 100 were allowed and exits 0
// when that is the burst plus at most what refilled meanwhile, every one decided by Redis.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "tollgate/tollgate.h"

namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "%s\n", status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  tollgate::Limit api;
  api.name = "api_per_user";
  api.numbers.algorithm = tollgate::Algorithm::kTokenBucket;
  api.numbers.capacity = 10;
  api.numbers.refill_per_second = 5;
  // Redis answers within a millisecond on a quiet host; the default deadline is 10 ms. This
  // program asserts that every decision came from Redis, so it allows a loaded test host 1 s.
  api.timeout_micros = 1'000'000;

  // A frozen clock makes the in-memory output exact; a real program leaves `clock` unset.
  tollgate::SimulatedClock clock;
  const std::string redis_url = argc > 1 ? argv[1] : "";
  absl::StatusOr<std::unique_ptr<tollgate::Fleet>> fleet =
      tollgate::Fleet::Connect({.limits = {api},
                                .redis = {.url = redis_url},
                                .clock = redis_url.empty() ? &clock : nullptr});
  if (!fleet.ok()) return Fail(fleet.status());
  tollgate::Limiter& limiter = (*fleet)->limiter();

  // On a shared Redis, a key of this run's own.
  const std::string user = redis_url.empty() ? "user:42" : "user:" + std::to_string(getpid());
  const auto started = std::chrono::steady_clock::now();
  int allowed = 0;
  for (int attempt = 0; attempt < 100; ++attempt) {
    absl::StatusOr<tollgate::Decision> decision = limiter.Check("api_per_user", user);
    if (!decision.ok()) return Fail(decision.status());
    if (!redis_url.empty() && decision->source != tollgate::DecisionSource::kRedis) {
      std::fprintf(stderr, "decided by %s, not Redis\n",
                   std::string(tollgate::DecisionSourceName(decision->source)).c_str());
      return 1;
    }
    if (decision->allowed) ++allowed;
  }
  if (!redis_url.empty()) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::printf("allowed %d of 100 in Redis\n", allowed);
    return allowed >= 10 && allowed <= 10 + 5 * seconds + 1 ? 0 : 1;
  }
  clock.AdvanceMillis(1000);  // one second refills 5 tokens
  int after_one_second = 0;
  for (int attempt = 0; attempt < 100; ++attempt) {
    if (limiter.Check("api_per_user", user)->allowed) ++after_one_second;
  }
  std::printf("allowed %d of 100, then %d after one second\n", allowed, after_one_second);
  return allowed == 10 && after_one_second == 5 ? 0 : 1;
}
