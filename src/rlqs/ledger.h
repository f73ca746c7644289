// Copyright tollgate authors. What one tollgate instance knows of its Rate Limit Quota Service
// streams: every stream's buckets (subscriptions), and per (limit, key) they count against, the
// units its Envoys reported admitted, in sync mode's entry (src/store/sync/entry.h) so that
// Redis' sync script (src/store/redis/lua/sync.lua) counts them and grants this instance its
// share of what is left. Assignments divide that grant among the buckets (assign.h).
//
// A round (RlqsService runs one every RlqsLedgerOptions::round_micros):
//   1. Rematch: after a config reload, every bucket is matched again (bucket.h).
//   2. TakeCounters: per (limit, key), the units reported since the last round and the demand
//      of its buckets, as the sync script's items (with Redis; skipped without).
//   3. ApplyReplies: the script's totals and grants (or nothing when the call failed).
//   4. Assign: the assignments of every bucket that reported since its last one (assign.h),
//      and an AbandonAction for each bucket without a request reported for
//      RlqsLedgerOptions::idle_micros.
//      The grant is the script's; without Redis, the whole limit less what this instance's
//      Envoys were granted or admitted in the window; with Redis away, by the rule's
//      rlqs_on_store_failure:
//      fail_open, this instance's fallback share of the limit (FallbackShare, src/algorithm/
//      share.h) less what its Envoys were granted or admitted in the window; fail_closed,
//      DENY_ALL; expire, nothing: the assignments Envoy holds expire into its own
//      expired_assignment_behavior. Unset, it follows the rule's on_store_failure (so fail_open
//      by default).
//
// Thread-safe: one mutex guards everything; a report holds it for the time of its buckets.
#ifndef TOLLGATE_SRC_SERVER_RLQS_LEDGER_H_
#define TOLLGATE_SRC_SERVER_RLQS_LEDGER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "envoy/service/rate_limit_quota/v3/rlqs.pb.h"
#include "src/rlqs/bucket.h"
#include "src/server/check_service.h"
#include "src/server/grpc_stream.h"
#include "src/server/rlqs_stats.h"
#include "src/store/sync/round.h"

namespace tollgate::rlqs {

using RateLimitQuotaUsageReports = envoy::service::rate_limit_quota::v3::RateLimitQuotaUsageReports;
using RateLimitQuotaResponse = envoy::service::rate_limit_quota::v3::RateLimitQuotaResponse;

struct RlqsLedgerOptions {
  // How often a round runs: how often this instance syncs with Redis and assigns.
  int64_t round_micros = 1'000'000;
  // A bucket whose reports show no request for this long is abandoned (AbandonAction); so is
  // one not reported at all for this long. (Envoy reports every bucket it holds, idle or not.)
  int64_t idle_micros = 10'000'000;
  // A bucket's reporting interval until two of its reports show it (Envoy's default is 5 s).
  int64_t assumed_reporting_interval_micros = 5'000'000;
  // Buckets one stream may hold; reports of further buckets are ignored (no assignment: Envoy
  // applies its no_assignment_behavior), counted in server::RlqsStats::refused_buckets.
  size_t max_buckets_per_stream = 10'000;
  // At most this many actions in one response message (more are split).
  size_t max_actions_per_message = 1'000;
  // The Redis layout (the sync store's and exact store's): <key_prefix><limit>:{<key>}:<window>.
  std::string key_prefix = "tollgate:";
  // One script call per hash slot (Redis Cluster): the items' slots.
  bool group_by_slot = false;
};

// What one round's assignments are decided with.
struct RlqsAssignContext {
  int64_t monotonic_micros = 0;
  // Time of the limits' windows (Redis' clock, as learned).
  int64_t now_micros = 0;
  // Whether the limits live in Redis, and whether this round's calls reached it.
  bool shared = false;
  bool store_ok = true;
  int64_t instances = 1;  // N
  // fail_open: the fraction of `limit` this instance's fallback takes among N (1/N when null).
  std::function<double(std::string_view limit, int64_t instances)> fallback_fraction;
};

class RlqsLedger {
 public:
  using StreamId = uint64_t;

  explicit RlqsLedger(RlqsLedgerOptions options);
  RlqsLedger(const RlqsLedger&) = delete;
  RlqsLedger& operator=(const RlqsLedger&) = delete;
  ~RlqsLedger();

  StreamId OpenStream(std::shared_ptr<server::GrpcStreamWriter> writer);
  // Forgets the stream's buckets (no AbandonAction: the stream is gone).
  void CloseStream(StreamId stream);

  // One message of `stream`, matched against `snapshot`. Returns whether it subscribed a new
  // bucket (the service then brings the next round forward). InvalidArgument (the stream is to
  // end with it) for a first message without a domain, a domain other than the stream's, or a
  // BucketId without pairs or with an empty key, naming the field.
  absl::StatusOr<bool> Report(StreamId stream, const RateLimitQuotaUsageReports& reports,
                              const std::shared_ptr<const server::CheckSnapshot>& snapshot,
                              int64_t monotonic_micros, int64_t now_micros);

  // Step 1: matches every bucket again when `snapshot` is not the one they were matched with.
  void Rematch(const std::shared_ptr<const server::CheckSnapshot>& snapshot, int64_t now_micros);
  // Step 2: the script items of every (limit, key), each rolled to the window of `now_micros`.
  std::vector<sync::CounterItem> TakeCounters(int64_t monotonic_micros, int64_t now_micros);
  // Step 3: `items` of one call, with the reply to its last batch (`replies`: one per item of
  // it) or nullptr when the call failed or for its earlier batches.
  void ApplyReplies(const std::vector<sync::CounterItem>& items,
                    const std::vector<sync::CounterReply>* replies);
  // Step 4: the messages to send, each to its stream's writer.
  struct Outgoing {
    std::shared_ptr<server::GrpcStreamWriter> writer;
    std::string message;
  };
  std::vector<Outgoing> Assign(const RlqsAssignContext& context);

  server::RlqsStats stats() const;
  // When the next fixed window of a limit with buckets starts (`now_micros`' time), as the
  // last Assign saw; 0: none. A round right after it gives that window's grants at once.
  int64_t next_boundary_micros() const { return next_boundary_.load(std::memory_order_relaxed); }

 private:
  struct Entry;
  struct Subscription;
  struct Stream;

  // The entry of a kCounted target, made (or remade, when its limit's numbers changed).
  Entry* EntryFor(const BucketTarget& target, int64_t now_micros)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Attach(Subscription& sub, const server::CheckSnapshot& snapshot, int64_t now_micros)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Detach(Subscription& sub) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RematchLocked(const std::shared_ptr<const server::CheckSnapshot>& snapshot,
                     int64_t now_micros) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What this instance may still admit of `entry` this round, beyond what is counted or
  // charged; -1: assign nothing (no grant known yet, or the limit lets assignments expire).
  int64_t AvailableOf(Entry& entry, const RlqsAssignContext& context)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts `units` against `entry` in the window of `now_micros` (sent to Redis at the next
  // round; and in the local count the fallback uses).
  void Charge(Entry& entry, int64_t units, int64_t now_micros) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // When the next fixed window of any counted entry starts, in `now_micros`' time (0: none).
  int64_t NextBoundary(int64_t now_micros) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t TtlSeconds(const Subscription& sub) const;

  const RlqsLedgerOptions options_;
  mutable absl::Mutex mu_;
  StreamId next_stream_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<StreamId, std::unique_ptr<Stream>> streams_ ABSL_GUARDED_BY(mu_);
  // By limit name, '\0', store key.
  absl::flat_hash_map<std::string, std::unique_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
  // The snapshot the buckets were matched with (compared by address).
  std::shared_ptr<const server::CheckSnapshot> matched_ ABSL_GUARDED_BY(mu_);
  int64_t buckets_ ABSL_GUARDED_BY(mu_) = 0;

  std::atomic<int64_t> next_boundary_{0};
  std::atomic<int64_t> reports_{0};
  std::atomic<int64_t> token_bucket_assignments_{0};
  std::atomic<int64_t> deny_all_assignments_{0};
  std::atomic<int64_t> allow_all_assignments_{0};
  std::atomic<int64_t> abandoned_{0};
  std::atomic<int64_t> refused_{0};
  std::atomic<int64_t> rounds_{0};
  std::atomic<int64_t> failed_rounds_{0};
};

}  // namespace tollgate::rlqs

#endif  // TOLLGATE_SRC_SERVER_RLQS_LEDGER_H_
