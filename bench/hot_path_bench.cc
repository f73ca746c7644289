// Copyright tollgate authors. Parts of every decision of `tollgate serve` on its event loop.
// The shared state a Redis decision touches, from one thread and from two at once (two
// loops): the circuit breaker's Admit and RecordSuccess, and FallbackShares::Count (a
// demand-shared fail_open limit). And a ShouldRateLimit request as Envoy sends it, read in
// place (src/server/rls_request.h) and parsed by protobuf onto an arena.
//
//   cmake -S . -B build-rel -G Ninja -DCMAKE_BUILD_TYPE=Release -DTOLLGATE_BUILD_BENCH=ON
//   cmake --build build-rel --target hot_path_bench
//   build-rel/bench/hot_path_bench
#include <cstddef>
#include <string>

#include "benchmark/benchmark.h"
#include "google/protobuf/arena.h"
#include "src/resilience/circuit_breaker.h"
#include "src/server/rls_request.h"
#include "tollgate/clock.h"
#include "tollgate/fallback_shares.h"

namespace tollgate {
namespace {

FallbackShares& Shares() {
  static const std::shared_ptr<FallbackShares> shares = FallbackShares::Create();
  return *shares;
}

void BM_Count(benchmark::State& state) {
  FallbackShares& shares = Shares();
  for (auto _ : state) shares.Count("api_per_user", 1);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Count)->Threads(1)->Threads(2)->UseRealTime();

resilience::CircuitBreaker& Breaker() {
  static auto* const breaker = new resilience::CircuitBreaker(
      {.failure_threshold = 5, .open_duration_ms = 500}, &SystemClock());
  return *breaker;
}

// One call's worth: admitted, then answered.
void BM_BreakerAdmitAndSucceed(benchmark::State& state) {
  resilience::CircuitBreaker& breaker = Breaker();
  for (auto _ : state) {
    benchmark::DoNotOptimize(breaker.Admit());
    benchmark::DoNotOptimize(breaker.RecordSuccess(false));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_BreakerAdmitAndSucceed)->Threads(1)->Threads(2)->UseRealTime();

// A ShouldRateLimit request as bench/h2_load and Envoy's rate-limit filter send it: a domain
// and one descriptor of one entry.
std::string RlsRequestBytes() {
  envoy::service::ratelimit::v3::RateLimitRequest request;
  request.set_domain("bench");
  auto* entry = request.add_descriptors()->add_entries();
  entry->set_key("user");
  entry->set_value("user1234");
  return request.SerializeAsString();
}

void BM_ReadRlsRequest(benchmark::State& state) {
  const std::string bytes = RlsRequestBytes();
  size_t entries = 0;
  for (auto _ : state) {
    server::RateLimitRequestView request;
    if (!server::ReadRateLimitRequest(bytes, &request)) state.SkipWithError("not read");
    entries += request.descriptors[0].entries.size();
  }
  benchmark::DoNotOptimize(entries);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ReadRlsRequest);

// What src/server/rls_grpc.cc did before: protobuf's parser onto an arena whose first block
// is on the stack (one allocation per request), then the view the plan reads.
void BM_ReadRlsRequestProtobuf(benchmark::State& state) {
  const std::string bytes = RlsRequestBytes();
  size_t entries = 0;
  for (auto _ : state) {
    alignas(std::max_align_t) char block[1024];
    google::protobuf::ArenaOptions options;
    options.initial_block = block;
    options.initial_block_size = sizeof(block);
    google::protobuf::Arena arena(options);
    auto* message =
        google::protobuf::Arena::CreateMessage<envoy::service::ratelimit::v3::RateLimitRequest>(
            &arena);
    if (!message->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      state.SkipWithError("not parsed");
    }
    entries += server::RateLimitRequestView::Of(*message).descriptors[0].entries.size();
  }
  benchmark::DoNotOptimize(entries);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ReadRlsRequestProtobuf);

}  // namespace
}  // namespace tollgate
