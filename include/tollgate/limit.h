// Copyright tollgate authors. What a limit is.
#ifndef TOLLGATE_LIMIT_H_
#define TOLLGATE_LIMIT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace tollgate {

enum class Algorithm {
  // `capacity` tokens, refilled continuously at `refill_per_second`.
  kTokenBucket,
  // At most `limit` per window aligned to the Unix epoch (window index = now / window).
  kFixedWindow,
  // Two-counter approximation: previous window weighted by its overlap with the last
  // `window`, plus the current window.
  kSlidingWindow,
  // At most `limit` leases held at once per key; a lease not renewed or released expires
  // after `window_micros` (the lease time). Not a rate: see src/algorithm/concurrency.h.
  kConcurrency,
};

// What a limit does when its store (Redis) cannot answer within the deadline.
enum class FailureMode {
  // Answer from a local in-memory limiter at this instance's share of the limit (`shares`).
  kFailOpen,
  // Refuse (HTTP 503 with Retry-After).
  kFailClosed,
  // Answer from a strict local limiter with its own numbers (`Limit::local`).
  kLocal,
};

enum class Mode {
  // Every decision is made by the store in one atomic step.
  kExact,
  // Counts locally and syncs with the store every `sync_interval_micros`.
  kSync,
};

// How a limit is divided among the live instances where each decides alone: sync mode's
// grants, and the fail_open fallback's local limits while the store is unreachable
// (src/algorithm/share.h, docs/sync.md, docs/resilience.md).
enum class Shares {
  // In proportion to each instance's recent demand for the limit, with a floor for an
  // instance that has just started seeing it.
  kDemand,
  // limit / N each, whatever the traffic.
  kEqual,
};

// The numbers of one algorithm. For a token bucket: `capacity` and `refill_per_second`.
// For the windows: `limit` and `window_micros`. For concurrency: `limit` (leases held at
// once) and `window_micros` (the lease time), so a share of it (limit / N) is a share of the
// slots.
struct LimitNumbers {
  Algorithm algorithm = Algorithm::kTokenBucket;
  int64_t capacity = 0;
  double refill_per_second = 0;
  int64_t limit = 0;
  int64_t window_micros = 0;

  // The most one key can ever be allowed at once (capacity or limit).
  int64_t MaxCost() const { return algorithm == Algorithm::kTokenBucket ? capacity : limit; }
};

// One named limit, as loaded from configuration.
struct Limit {
  std::string name;
  LimitNumbers numbers;
  FailureMode on_store_failure = FailureMode::kFailOpen;
  // Used when `on_store_failure` is kLocal.
  std::optional<LimitNumbers> local;
  // Deadline for one store call on behalf of this limit.
  int64_t timeout_micros = 10'000;
  Mode mode = Mode::kExact;
  int64_t sync_interval_micros = 1'000'000;
  // Sync mode admits a bounded overshoot between syncs; a fail_closed limit is one that must
  // stay exact (5 OTP guesses). Both together are refused unless this says the overshoot is
  // accepted.
  bool allow_sync_with_fail_closed = false;
  Shares shares = Shares::kDemand;
  // How long a reservation of this limit (CheckRequest::reserve) can be settled: an unsettled
  // one stays charged at its estimate and is forgotten after this.
  int64_t reservation_ttl_micros = 3'600'000'000;
  // Whether an admission on the Redis store is answered only once a replica holds it (Redis
  // `WAIT` within `timeout_micros`; docs/redis.md#durable-limits), so that a failover to that
  // replica loses none. If no replica confirms in time the check is a store failure, answered
  // by `on_store_failure` (the count stays spent on the primary: fail_closed refuses, never
  // over-admits). Unset: the store's default, on for a fail_closed limit in exact mode on a
  // Redis Sentinel or Cluster deployment whose every primary had a replica at start
  // (RedisStore::Durable). Stores that keep no replicas (memory) ignore it; sync mode refuses
  // it (its counts reach Redis between syncs, never on the request path).
  std::optional<bool> durable = std::nullopt;
};

// OK, or InvalidArgument naming the limit and every field at fault: numbers outside their
// algorithm's range (counts from 1 to 10^12, a positive refill of at most 10^12 per second that
// fills the bucket within 365 days, positive windows and leases); `local` numbers present
// exactly when on_store_failure is kLocal, of the limit's kind (leases for a concurrency
// limit, a rate for a rate) and valid; in sync mode, a window limit (not a token bucket nor
// a concurrency limit), a sync interval from 10 ms to the window, fail_closed only with
// allow_sync_with_fail_closed, and `durable` not true. Limiter::Create, every store and the
// config files apply this one rule.
absl::Status ValidateLimit(const Limit& limit);

std::string_view AlgorithmName(Algorithm algorithm);
std::string_view FailureModeName(FailureMode mode);
std::string_view ModeName(Mode mode);
std::string_view SharesName(Shares shares);

}  // namespace tollgate

#endif  // TOLLGATE_LIMIT_H_
