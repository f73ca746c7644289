// Copyright tollgate authors.
#include "src/rlqs/ledger.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/algorithm/fixed_window.h"
#include "src/algorithm/share.h"
#include "src/algorithm/sliding_window.h"
#include "src/rlqs/assign.h"
#include "src/rlqs/bucket.h"
#include "src/store/redis/router.h"
#include "src/store/redis/slot.h"
#include "src/store/sync/entry.h"

namespace tollgate::rlqs {

// One (limit, key) the buckets of this instance's streams count against.
struct RlqsLedger::Entry {
  std::string name;  // limit name, '\0', key
  std::string limit_name;
  RlqsStoreFailure on_store_failure = RlqsStoreFailure::kFailOpen;
  sync::Entry sync;  // units reported and not yet counted in Redis, and the last grant
  // What this instance's Envoys reported admitted, by window (without Redis, and while Redis
  // is away: the fallback's count).
  int64_t local_window = 0;
  int64_t local_current = 0;
  int64_t local_previous = 0;
  std::vector<Subscription*> subscriptions;
};

// One bucket of one stream.
struct RlqsLedger::Subscription {
  Stream* stream = nullptr;
  std::string bucket_id;  // serialized, as Envoy sent it (actions carry it back)
  BucketEntries entries;
  BucketTarget::Kind kind = BucketTarget::Kind::kNotLimited;
  Entry* entry = nullptr;  // kCounted
  int64_t last_report_micros = 0;
  // Its last report with a request in it (or its first report): abandoned idle_micros after.
  int64_t last_active_micros = 0;
  // The longest of its last two gaps between reports (the assumed interval before).
  int64_t interval_micros = 0;
  int64_t last_gap_micros = 0;
  double demand_per_second = 0;
  // What Envoy may still admit of its grant, as far as its reports tell (the grant less what
  // they showed admitted since); the tokens of the last assignment (0: none, or DENY_ALL).
  int64_t outstanding = 0;
  int64_t last_tokens = 0;
  // Units charged to the window's counter for its grants and not yet matched by a reported
  // admission: a report's admissions are covered by them first, and only the rest is counted.
  int64_t prepaid = 0;
  // The window its last grant was charged to (a fixed window's grant ends with it), and
  // whether its next assignment must replace the bucket whatever it holds (it now counts
  // against another limit).
  int64_t grant_window = 0;
  bool force_replace = false;
  // When the last assignment's time to live ends: Envoy admits nothing more of it after.
  int64_t assignment_expires_micros = 0;
  bool refresh = true;  // reported since its last assignment
  bool parity = false;
};

struct RlqsLedger::Stream {
  std::shared_ptr<server::GrpcStreamWriter> writer;
  std::string domain;
  absl::flat_hash_map<std::string, std::unique_ptr<Subscription>> buckets;  // by BucketKey
  bool warned_full = false;
};

namespace {

// Moves the local counts to the window of `now_micros`.
void RollLocal(int64_t window_micros, int64_t now_micros, int64_t& window, int64_t& current,
               int64_t& previous) {
  const int64_t index = algorithm::WindowIndex(now_micros, window_micros);
  if (index <= window) return;
  previous = index == window + 1 ? current : 0;
  current = 0;
  window = index;
}

}  // namespace

RlqsLedger::RlqsLedger(RlqsLedgerOptions options) : options_(std::move(options)) {}

RlqsLedger::~RlqsLedger() {
  absl::MutexLock lock(&mu_);
  streams_.clear();
  entries_.clear();
}

RlqsLedger::StreamId RlqsLedger::OpenStream(std::shared_ptr<server::GrpcStreamWriter> writer) {
  absl::MutexLock lock(&mu_);
  const StreamId id = next_stream_++;
  auto stream = std::make_unique<Stream>();
  stream->writer = std::move(writer);
  streams_[id] = std::move(stream);
  return id;
}

void RlqsLedger::CloseStream(StreamId id) {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  for (auto& [key, sub] : it->second->buckets) Detach(*sub);
  buckets_ -= static_cast<int64_t>(it->second->buckets.size());
  streams_.erase(it);
}

RlqsLedger::Entry* RlqsLedger::EntryFor(const BucketTarget& target, int64_t now_micros) {
  const Limit& limit = *target.limit;
  const std::string& key = target.key;
  std::string name = absl::StrCat(limit.name, absl::string_view("\0", 1), key);
  const LimitNumbers numbers = RlqsWindowNumbers(limit.numbers);
  auto it = entries_.find(name);
  if (it != entries_.end()) {
    const sync::KeyInfo& info = *it->second->sync.info;
    if (info.numbers.limit == numbers.limit &&
        info.numbers.window_micros == numbers.window_micros &&
        info.numbers.algorithm == numbers.algorithm) {
      it->second->on_store_failure = target.on_store_failure;
      return it->second.get();
    }
  }
  auto info = std::make_shared<sync::KeyInfo>();
  info->limit_name = limit.name;
  info->numbers = numbers;
  info->sync_interval_micros = options_.round_micros;
  info->counter_base = absl::StrCat(options_.key_prefix, limit.name, ":{", key, "}");
  info->slot = options_.group_by_slot ? redis::KeySlot(info->counter_base) : redis::kAnySlot;
  info->shares = Shares::kDemand;
  auto entry = std::make_unique<Entry>();
  entry->name = name;
  entry->limit_name = limit.name;
  entry->on_store_failure = target.on_store_failure;
  entry->sync = sync::NewEntry(std::move(info), 0, now_micros);
  entry->local_window = entry->sync.window_index;
  if (it != entries_.end()) {
    // The limit's numbers changed with a reload: its buckets start over on the new ones.
    entry->subscriptions = std::move(it->second->subscriptions);
    for (Subscription* sub : entry->subscriptions) sub->entry = entry.get();
    it->second = std::move(entry);
    return it->second.get();
  }
  Entry* raw = entry.get();
  entries_.emplace(std::move(name), std::move(entry));
  return raw;
}

void RlqsLedger::Attach(Subscription& sub, const server::CheckSnapshot& snapshot,
                        int64_t now_micros) {
  absl::StatusOr<BucketTarget> target =
      MatchBucket(sub.stream->domain, sub.entries, *snapshot.matcher, *snapshot.limiter);
  // A bucket that cannot be counted (a key over the size limit) is not limited, as a request
  // descriptor with no rule.
  if (!target.ok()) target = BucketTarget{};
  sub.kind = target->kind;
  if (target->kind != BucketTarget::Kind::kCounted) return;
  sub.entry = EntryFor(*target, now_micros);
  sub.entry->subscriptions.push_back(&sub);
}

void RlqsLedger::Detach(Subscription& sub) {
  if (sub.entry == nullptr) return;
  std::vector<Subscription*>& subs = sub.entry->subscriptions;
  subs.erase(std::remove(subs.begin(), subs.end(), &sub), subs.end());
  sub.entry = nullptr;
}

absl::StatusOr<bool> RlqsLedger::Report(
    StreamId id, const RateLimitQuotaUsageReports& reports,
    const std::shared_ptr<const server::CheckSnapshot>& snapshot, int64_t monotonic_micros,
    int64_t now_micros) {
  absl::MutexLock lock(&mu_);
  auto found = streams_.find(id);
  if (found == streams_.end()) return false;
  Stream& stream = *found->second;
  if (stream.domain.empty()) {
    if (reports.domain().empty()) {
      return absl::InvalidArgumentError(
          "domain: the first RateLimitQuotaUsageReports of a stream must name its domain");
    }
    stream.domain = reports.domain();
  } else if (!reports.domain().empty() && reports.domain() != stream.domain) {
    return absl::InvalidArgumentError(absl::StrCat("domain: \"", reports.domain(),
                                                   "\" on a stream of domain \"", stream.domain,
                                                   "\"; open a new stream for another domain"));
  }
  RematchLocked(snapshot, now_micros);
  bool subscribed = false;
  BucketEntries entries;
  for (int i = 0; i < reports.bucket_quota_usages_size(); ++i) {
    const auto& usage = reports.bucket_quota_usages(i);
    if (absl::Status read = ReadBucketEntries(
            usage.bucket_id(), absl::StrCat("bucket_quota_usages[", i, "].bucket_id"), &entries);
        !read.ok()) {
      return read;
    }
    reports_.fetch_add(1, std::memory_order_relaxed);
    const std::string key = BucketKey(entries);
    auto it = stream.buckets.find(key);
    if (it == stream.buckets.end()) {
      if (stream.buckets.size() >= options_.max_buckets_per_stream) {
        refused_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      auto sub = std::make_unique<Subscription>();
      sub->stream = &stream;
      sub->bucket_id = usage.bucket_id().SerializeAsString();
      sub->entries = entries;
      sub->last_active_micros = monotonic_micros;
      sub->interval_micros = options_.assumed_reporting_interval_micros;
      sub->last_gap_micros = options_.assumed_reporting_interval_micros;
      Attach(*sub, *snapshot, now_micros);
      it = stream.buckets.emplace(key, std::move(sub)).first;
      ++buckets_;
      subscribed = true;
    }
    Subscription& sub = *it->second;
    const int64_t allowed =
        static_cast<int64_t>(std::min<uint64_t>(usage.num_requests_allowed(), uint64_t{1} << 40));
    const int64_t denied =
        static_cast<int64_t>(std::min<uint64_t>(usage.num_requests_denied(), uint64_t{1} << 40));
    // The gap since its last report on this server's clock (Envoy sends whole seconds).
    int64_t gap = sub.last_report_micros > 0 ? monotonic_micros - sub.last_report_micros
                                             : options_.assumed_reporting_interval_micros;
    gap = std::max<int64_t>(gap, 1000);
    if (sub.last_report_micros > 0) {
      sub.interval_micros = std::max(gap, sub.last_gap_micros);
      sub.last_gap_micros = gap;
    }
    sub.last_report_micros = monotonic_micros;
    if (allowed + denied > 0) sub.last_active_micros = monotonic_micros;
    sub.demand_per_second = static_cast<double>(allowed + denied) * 1e6 /
                            static_cast<double>(std::max(gap, options_.round_micros));
    // Admissions of its grants were charged when granted; only the rest is counted now
    // (admitted with no assignment, or after one expired). What is still prepaid after a
    // report is at most what its grant has left: the rest was never spent (a replaced bucket).
    const int64_t covered = std::min(allowed, sub.prepaid);
    const int64_t excess = allowed - covered;
    sub.outstanding = std::max<int64_t>(0, sub.outstanding - allowed);
    sub.prepaid = std::min(sub.prepaid - covered, sub.outstanding);
    sub.refresh = true;
    if (sub.entry != nullptr) {
      Entry& entry = *sub.entry;
      Charge(entry, excess, now_micros);
      entry.sync.last_check_micros = monotonic_micros;
    }
  }
  return subscribed;
}

void RlqsLedger::Charge(Entry& entry, int64_t units, int64_t now_micros) {
  const int64_t window = entry.sync.info->numbers.window_micros;
  sync::Roll(entry.sync, algorithm::WindowIndex(now_micros, window));
  RollLocal(window, now_micros, entry.local_window, entry.local_current, entry.local_previous);
  entry.sync.unsent_current += units;
  entry.local_current += units;
}

void RlqsLedger::Rematch(const std::shared_ptr<const server::CheckSnapshot>& snapshot,
                         int64_t now_micros) {
  absl::MutexLock lock(&mu_);
  RematchLocked(snapshot, now_micros);
}

void RlqsLedger::RematchLocked(const std::shared_ptr<const server::CheckSnapshot>& snapshot,
                               int64_t now_micros) {
  if (snapshot == matched_) return;
  matched_ = snapshot;
  for (auto& [id, stream] : streams_) {
    for (auto& [key, sub] : stream->buckets) {
      Entry* before = sub->entry;
      Detach(*sub);
      Attach(*sub, *snapshot, now_micros);
      sub->refresh = true;  // its assignment may have changed
      if (sub->entry != before) {
        // What it was charged stays with the old limit's counter; its bucket is replaced.
        sub->prepaid = 0;
        sub->force_replace = true;
      }
    }
  }
}

std::vector<sync::CounterItem> RlqsLedger::TakeCounters(int64_t monotonic_micros,
                                                        int64_t now_micros) {
  absl::MutexLock lock(&mu_);
  std::vector<sync::CounterItem> items;
  const double round_seconds = static_cast<double>(options_.round_micros) / 1e6;
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry& entry = *it->second;
    const int64_t window = entry.sync.info->numbers.window_micros;
    sync::Roll(entry.sync, algorithm::WindowIndex(now_micros, window));
    if (entry.subscriptions.empty() && !entry.sync.HasDeltas() &&
        now_micros >= entry.sync.ExpiresAtMicros()) {
      entries_.erase(it++);  // nothing to count and nobody asking
      continue;
    }
    double demand = 0;
    for (const Subscription* sub : entry.subscriptions) {
      const bool fresh = monotonic_micros - sub->last_report_micros <= 2 * sub->interval_micros;
      if (fresh) demand += sub->demand_per_second;
    }
    entry.sync.demand = std::llround(demand * round_seconds);
    if (!entry.subscriptions.empty()) entry.sync.last_check_micros = monotonic_micros;
    sync::TakeCounters(entry.sync, entry.name, monotonic_micros, now_micros, /*force=*/true, items);
    ++it;
  }
  return items;
}

void RlqsLedger::ApplyReplies(const std::vector<sync::CounterItem>& items,
                              const std::vector<sync::CounterReply>* replies) {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < items.size(); ++i) {
    auto it = entries_.find(items[i].entry_key);
    if (it == entries_.end()) continue;
    sync::ApplyReply(it->second->sync, items[i], replies != nullptr ? &(*replies)[i] : nullptr);
  }
}

int64_t RlqsLedger::AvailableOf(Entry& entry, const RlqsAssignContext& context) {
  const LimitNumbers& numbers = entry.sync.info->numbers;
  if (context.shared && context.store_ok) {
    sync::Roll(entry.sync, algorithm::WindowIndex(context.now_micros, numbers.window_micros));
    // The grant is what Redis leaves this instance beyond what it counted; charges since
    // (grants sent, admissions reported beyond them) come out of it.
    if (entry.sync.grant_current < 0) return -1;
    return std::max<int64_t>(0, entry.sync.grant_current - entry.sync.unsent_current);
  }
  double fraction = 1;
  if (context.shared) {
    switch (entry.on_store_failure) {
      case RlqsStoreFailure::kFailClosed:
        return 0;
      case RlqsStoreFailure::kExpire:
        return -1;
      case RlqsStoreFailure::kFailOpen:
        fraction = context.fallback_fraction
                       ? context.fallback_fraction(entry.limit_name, context.instances)
                       : 1.0 / static_cast<double>(std::max<int64_t>(1, context.instances));
        break;
    }
  }
  const algorithm::ShareWeights weights =
      algorithm::FallbackFractionWeights(fraction, context.instances);
  const int64_t share =
      context.shared ? algorithm::FallbackShare(numbers.limit, weights) : numbers.limit;
  RollLocal(numbers.window_micros, context.now_micros, entry.local_window, entry.local_current,
            entry.local_previous);
  double used = static_cast<double>(entry.local_current);
  if (numbers.algorithm == Algorithm::kSlidingWindow) {
    used = algorithm::SlidingWindowEstimate(
        entry.local_previous, entry.local_current,
        context.now_micros - entry.local_window * numbers.window_micros,
        algorithm::WindowParams{share, numbers.window_micros});
  }
  return algorithm::FloorAtLeastZero(static_cast<double>(share) - used + 1e-9);
}

int64_t RlqsLedger::NextBoundary(int64_t now_micros) const {
  int64_t next = 0;
  for (const auto& [name, entry] : entries_) {
    const LimitNumbers& numbers = entry->sync.info->numbers;
    if (numbers.algorithm != Algorithm::kFixedWindow || entry->subscriptions.empty()) continue;
    const int64_t boundary =
        (algorithm::WindowIndex(now_micros, numbers.window_micros) + 1) * numbers.window_micros;
    if (next == 0 || boundary < next) next = boundary;
  }
  return next;
}

int64_t RlqsLedger::TtlSeconds(const Subscription& sub) const {
  return AssignmentTtlSeconds(sub.interval_micros, options_.round_micros);
}

std::vector<RlqsLedger::Outgoing> RlqsLedger::Assign(const RlqsAssignContext& context) {
  absl::MutexLock lock(&mu_);
  rounds_.fetch_add(1, std::memory_order_relaxed);
  if (context.shared && !context.store_ok) failed_rounds_.fetch_add(1, std::memory_order_relaxed);
  // The actions of each stream, in one response (or several of max_actions_per_message).
  absl::flat_hash_map<Stream*, std::vector<RateLimitQuotaResponse>> responses;
  auto add_action = [&](Subscription& sub) -> RlqsBucketAction* {
    std::vector<RateLimitQuotaResponse>& list = responses[sub.stream];
    if (list.empty() ||
        static_cast<size_t>(list.back().bucket_action_size()) >= options_.max_actions_per_message) {
      list.emplace_back();
    }
    return list.back().add_bucket_action();
  };
  auto send = [&](Subscription& sub, const RlqsAssignment& assignment) {
    WriteAssignment(assignment, sub.bucket_id, add_action(sub));
    switch (assignment.strategy) {
      case RlqsAssignment::Strategy::kAllowAll:
        allow_all_assignments_.fetch_add(1, std::memory_order_relaxed);
        break;
      case RlqsAssignment::Strategy::kDenyAll:
        deny_all_assignments_.fetch_add(1, std::memory_order_relaxed);
        break;
      case RlqsAssignment::Strategy::kTokenBucket:
        token_bucket_assignments_.fetch_add(1, std::memory_order_relaxed);
        break;
    }
    sub.refresh = false;
  };

  // Buckets not reported for idle_micros are abandoned first.
  for (auto& [id, stream] : streams_) {
    for (auto it = stream->buckets.begin(); it != stream->buckets.end();) {
      Subscription& sub = *it->second;
      if (context.monotonic_micros - sub.last_active_micros < options_.idle_micros) {
        ++it;
        continue;
      }
      WriteAbandon(sub.bucket_id, add_action(sub));
      abandoned_.fetch_add(1, std::memory_order_relaxed);
      Detach(sub);
      stream->buckets.erase(it++);
      --buckets_;
    }
  }

  // Counted buckets: what this instance may still admit of each (limit, key), divided among
  // its buckets.
  std::vector<RlqsShareInput> inputs;
  for (auto& [name, entry] : entries_) {
    if (entry->subscriptions.empty()) continue;
    const int64_t available = AvailableOf(*entry, context);
    if (available < 0) continue;
    const bool fixed = entry->sync.info->numbers.algorithm == Algorithm::kFixedWindow;
    const int64_t window = entry->sync.window_index;
    inputs.clear();
    for (Subscription* sub : entry->subscriptions) {
      // Past its time to live, Envoy admits nothing more of an assignment.
      if (context.monotonic_micros >= sub->assignment_expires_micros) sub->outstanding = 0;
      const bool fresh =
          context.monotonic_micros - sub->last_report_micros <= 2 * sub->interval_micros;
      // A new grant replaces the bucket Envoy holds, so it goes to a bucket whose reports show
      // its grant spent (a replacement would waste the rest), that holds DENY_ALL or nothing,
      // or whose grant belongs to a fixed window that is over (a window's grants end with it).
      const bool replace = (sub->refresh && sub->outstanding == 0) || sub->last_tokens == 0 ||
                           sub->force_replace || (fixed && sub->grant_window != window);
      inputs.push_back(
          {.demand_per_second = fresh ? sub->demand_per_second : 0, .refresh = replace});
    }
    const std::vector<int64_t> fresh = SplitGrant(available, inputs);
    for (size_t i = 0; i < entry->subscriptions.size(); ++i) {
      Subscription& sub = *entry->subscriptions[i];
      const int64_t ttl_seconds = TtlSeconds(sub);
      if (inputs[i].refresh) {
        // Still DENY_ALL, unreported: nothing new to say.
        if (!sub.refresh && sub.last_tokens == 0 && fresh[i] == 0 && !sub.force_replace) continue;
        Charge(*entry, fresh[i], context.now_micros);
        sub.prepaid += fresh[i];
        sub.outstanding = fresh[i];
        sub.last_tokens = fresh[i];
        sub.grant_window = window;
        sub.force_replace = false;
        sub.parity = !sub.parity;
        sub.assignment_expires_micros = context.monotonic_micros + ttl_seconds * 1'000'000;
        send(sub, GrantAssignment(fresh[i], sub.parity, ttl_seconds));
        continue;
      }
      // A bucket still spending its grant keeps it; when the grant would expire before its
      // next report can renew it, the same assignment again extends it (Envoy keeps an equal
      // bucket as it is).
      if (sub.assignment_expires_micros - context.monotonic_micros <
          sub.interval_micros + options_.round_micros) {
        sub.assignment_expires_micros = context.monotonic_micros + ttl_seconds * 1'000'000;
        send(sub, GrantAssignment(sub.last_tokens, sub.parity, ttl_seconds));
      }
    }
  }

  // Buckets not counted: ALLOW_ALL, or DENY_ALL for a rule of requests_per_unit 0.
  for (auto& [id, stream] : streams_) {
    for (auto& [key, sub] : stream->buckets) {
      if (!sub->refresh || sub->kind == BucketTarget::Kind::kCounted) continue;
      RlqsAssignment assignment;
      assignment.strategy = sub->kind == BucketTarget::Kind::kBlocked
                                ? RlqsAssignment::Strategy::kDenyAll
                                : RlqsAssignment::Strategy::kAllowAll;
      assignment.ttl_seconds = TtlSeconds(*sub);
      send(*sub, assignment);
    }
  }

  next_boundary_.store(NextBoundary(context.now_micros), std::memory_order_relaxed);
  std::vector<Outgoing> out;
  for (auto& [stream, list] : responses) {
    for (RateLimitQuotaResponse& response : list) {
      out.push_back({stream->writer, response.SerializeAsString()});
    }
  }
  return out;
}

server::RlqsStats RlqsLedger::stats() const {
  server::RlqsStats stats;
  {
    absl::MutexLock lock(&mu_);
    stats.streams = static_cast<int64_t>(streams_.size());
    stats.buckets = buckets_;
  }
  stats.reports = reports_.load(std::memory_order_relaxed);
  stats.token_bucket_assignments = token_bucket_assignments_.load(std::memory_order_relaxed);
  stats.deny_all_assignments = deny_all_assignments_.load(std::memory_order_relaxed);
  stats.allow_all_assignments = allow_all_assignments_.load(std::memory_order_relaxed);
  stats.abandoned_buckets = abandoned_.load(std::memory_order_relaxed);
  stats.refused_buckets = refused_.load(std::memory_order_relaxed);
  stats.rounds = rounds_.load(std::memory_order_relaxed);
  stats.failed_rounds = failed_rounds_.load(std::memory_order_relaxed);
  return stats;
}

}  // namespace tollgate::rlqs
