// A loop that limits itself: 5 requests a second per user, burst of 10.
// Prints how many of 100 back-to-back attempts were allowed (the burst: 10) and exits 0
// when that matches the limit.
#include <cstdio>

#include "tollgate/tollgate.h"

int main() {
  tollgate::Limit api;
  api.name = "api_per_user";
  api.numbers.algorithm = tollgate::Algorithm::kTokenBucket;
  api.numbers.capacity = 10;
  api.numbers.refill_per_second = 5;

  // A frozen clock makes the output exact; a real program leaves `clock` unset.
  tollgate::SimulatedClock clock;
  auto limiter = tollgate::Limiter::Create({.limits = {api}, .clock = &clock});
  if (!limiter.ok()) {
    std::fprintf(stderr, "%s\n", limiter.status().ToString().c_str());
    return 1;
  }
  int allowed = 0;
  for (int attempt = 0; attempt < 100; ++attempt) {
    absl::StatusOr<tollgate::Decision> decision = (*limiter)->Check("api_per_user", "user:42");
    if (!decision.ok()) {
      std::fprintf(stderr, "%s\n", decision.status().ToString().c_str());
      return 1;
    }
    if (decision->allowed) ++allowed;
  }
  clock.AdvanceMillis(1000);  // one second refills 5 tokens
  int after_one_second = 0;
  for (int attempt = 0; attempt < 100; ++attempt) {
    if ((*limiter)->Check("api_per_user", "user:42")->allowed) ++after_one_second;
  }
  std::printf("allowed %d of 100, then %d after one second\n", allowed, after_one_second);
  return allowed == 10 && after_one_second == 5 ? 0 : 1;
}
