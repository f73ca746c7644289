// Copyright tollgate authors. SyncStore's wiring: the key table (key_table.h) answers every
// check; rounds (round.h) are scheduled on the injected Timers and sent over the Redis
// connections, asynchronously, one round at a time. Everything lives in a SyncCore that a
// round in flight keeps alive, so the store may go on any thread, one of the connections'
// loops included, without waiting there for a reply that needs it.
#include "tollgate/sync_store.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "src/core/timer_task.h"
#include "src/store/redis/lua_scripts.h"
#include "src/store/redis/redis_connections_impl.h"
#include "src/store/redis/router.h"
#include "src/store/sync/key_table.h"
#include "src/store/sync/round.h"
#include "src/store/sync/send_call.h"
#include "src/store/sync/sync_store_testing.h"

namespace tollgate {
namespace {

using redis::RedisReply;

constexpr int kMaxShards = 1 << 16;

std::string RandomInstanceId() {
  std::random_device random;
  std::mt19937_64 generator((static_cast<uint64_t>(random()) << 32) ^ random());
  return absl::StrCat(absl::Hex(generator(), absl::kZeroPad16));
}

class SyncCore : public std::enable_shared_from_this<SyncCore> {
 public:
  SyncCore(SyncStoreOptions options, sync::SyncStoreTestOptions test,
           std::shared_ptr<RedisConnections> connections, std::string script_sha,
           std::shared_ptr<Timers> timers)
      : options_(std::move(options)),
        test_(std::move(test)),
        clock_(options_.clock != nullptr ? options_.clock : &SystemClock()),
        connections_(std::move(connections)),
        router_(redis::RouterOf(*connections_)),
        timers_(std::move(timers)),
        script_sha_(std::move(script_sha)),
        instance_id_(RandomInstanceId()),
        sequence_key_(absl::StrCat(options_.key_prefix, "sync:", instance_id_)) {}

  // Stops the rounds and runs a last one, after the one in flight if any, so the other
  // instances' counts include this one's deltas. Waits for it unless on one of the
  // connections' I/O threads (where its reply may have to be handled).
  void Close() {
    if (task_ != nullptr) task_->Stop();
    if (table_ == nullptr) return;
    bool start = false;
    {
      absl::MutexLock lock(&round_mu_);
      closing_ = true;
      if (!round_running_) {
        round_running_ = true;
        start = true;
      }
    }
    if (start) StartLastRound();
    if (!router_.OnIoThread()) closed_.WaitForNotification();
  }

  absl::Status Init(int shards) {
    absl::StatusOr<std::unique_ptr<sync::KeyTable>> table = sync::KeyTable::Create({
        .clock = clock_,
        .key_prefix = options_.key_prefix,
        .max_keys = options_.max_keys,
        .shards = shards,
        // One call per hash slot on a cluster; one call to the one server or the primary
        // that Sentinel names.
        .group_by_slot = router_.topology() == redis::Topology::kCluster,
        // A new key with a shorter interval than any before brings the next round forward;
        // the scheduled one could be up to 1 s away.
        .on_shorter_interval =
            [this](int64_t interval_micros) {
              if (task_ != nullptr) task_->RunWithin(interval_micros);
            },  // the table is the core's: `this` outlives it
    });
    if (!table.ok()) return table.status();
    table_ = *std::move(table);
    table_->SetInstances(InstanceCount());
    return LearnClockOffset();
  }

  // Schedules rounds on the timers, from one of the connections' threads (a loop of a
  // service), and returns once the first one is scheduled.
  // REQUIRES: not on one of the connections' threads.
  void ScheduleRounds() {
    task_ = std::make_unique<internal::TimerTask>(
        timers_, [weak = weak_from_this()](internal::TimerTask::Next next) {
          std::shared_ptr<SyncCore> self = weak.lock();
          if (self == nullptr) return;
          self->OnTimer(std::move(next));
        });
    auto scheduled = std::make_shared<absl::Notification>();
    router_.Post([start = task_->Starter(table_->shortest_interval_micros()), scheduled]() mutable {
      std::move(start)();
      scheduled->Notify();
    });
    scheduled->WaitForNotification();
  }

  sync::KeyTable& table() { return *table_; }
  redis::Router& router() const { return router_; }

  absl::Status SyncNow() {
    {
      absl::MutexLock lock(&round_mu_);
      round_mu_.Await(absl::Condition(
          +[](bool* running) { return !*running; }, &round_running_));
      round_running_ = true;
    }
    absl::Notification finished;
    absl::Status status;
    StartRound(/*force=*/true, [&](absl::Status round_status) {
      status = std::move(round_status);
      finished.Notify();
    });
    finished.WaitForNotification();
    EndRound();
    return status;
  }

  SyncStoreStats stats() const {
    SyncStoreStats stats;
    stats.syncs = syncs_.load(std::memory_order_relaxed);
    stats.sync_failures = sync_failures_.load(std::memory_order_relaxed);
    stats.redis_commands = redis_commands_.load(std::memory_order_relaxed);
    stats.keys_tracked = table_->keys_tracked();
    stats.keys_synced = table_->keys_synced();
    stats.overflow_decisions = table_->overflow_decisions();
    stats.dropped_units = table_->dropped_units();
    stats.clock_offset_micros = table_->clock_offset_micros();
    return stats;
  }

 private:
  // One round in flight: its calls (which own their batches), their replies as they come.
  struct Round {
    sync::CallContext context;
    std::vector<sync::SlotCall> calls;
    std::vector<absl::StatusOr<RedisReply>> replies;
    std::atomic<size_t> outstanding{0};
    int64_t sent_micros = 0;  // the store's clock
    absl::AnyInvocable<void(absl::Status) &&> done;
  };

  int64_t InstanceCount() const {
    return std::max<int64_t>(1, options_.instance_count ? options_.instance_count() : 1);
  }

  absl::Status LearnClockOffset() {
    const int64_t before = clock_->NowMicros();
    absl::StatusOr<RedisReply> reply = router_.Command({"TIME"});
    const int64_t after = clock_->NowMicros();
    if (!reply.ok()) return reply.status();
    int64_t seconds = 0, micros = 0;
    if (reply->type != RedisReply::Type::kArray || reply->elements.size() != 2 ||
        !absl::SimpleAtoi(reply->elements[0].str, &seconds) ||
        !absl::SimpleAtoi(reply->elements[1].str, &micros)) {
      return absl::InternalError(absl::StrCat("unexpected TIME reply: ", DebugString(*reply)));
    }
    SetOffset(seconds * 1'000'000 + micros, before, after);
    return absl::OkStatus();
  }

  void SetOffset(int64_t redis_micros, int64_t before, int64_t after) {
    if (!test_.use_redis_time) return;
    // Redis read its clock somewhere between our two readings; the midpoint is off by at
    // most half the round trip.
    table_->SetClockOffset(redis_micros - (before + (after - before) / 2));
  }

  // A scheduled round, unless one (SyncNow's, the last) is running or the store is closing;
  // either way the next is one tick (the shortest interval of any key) after this one ends.
  void OnTimer(internal::TimerTask::Next next) {
    bool start = false;
    {
      absl::MutexLock lock(&round_mu_);
      start = !round_running_ && !closing_;
      round_running_ = round_running_ || start;
    }
    if (!start) {
      std::move(next)(table_->shortest_interval_micros());
      return;
    }
    StartRound(/*force=*/false,
               [self = shared_from_this(), next = std::move(next)](const absl::Status&) mutable {
                 self->EndRound();
                 std::move(next)(self->table_->shortest_interval_micros());
               });
  }

  // Ends a round; once the store is closing, the last round runs instead (after the one that
  // was in flight when it began to close).
  void EndRound() {
    {
      absl::MutexLock lock(&round_mu_);
      if (!closing_ || last_round_started_) {
        round_running_ = false;
        return;
      }
    }
    StartLastRound();
  }

  void StartLastRound() {
    {
      absl::MutexLock lock(&round_mu_);
      last_round_started_ = true;
    }
    StartRound(/*force=*/true, [self = shared_from_this()](const absl::Status&) {
      {
        absl::MutexLock lock(&self->round_mu_);
        self->round_running_ = false;
      }
      self->closed_.Notify();
    });
  }

  // Takes the due counters, sends one call per slot with anything to send, and runs `done`
  // once every call is answered (inline when there is nothing to send).
  // REQUIRES: round_running_ was set by this round's caller.
  void StartRound(bool force, absl::AnyInvocable<void(absl::Status) &&> done) {
    const int64_t instances = InstanceCount();
    table_->SetInstances(instances);
    std::vector<sync::CounterItem> items = table_->TakeCounters(force);
    sync::PendingBatches::Calls calls;
    {
      absl::MutexLock lock(&pending_mu_);
      calls = pending_.Take(++sequence_, std::move(items), table_->NowMicros());
    }
    for (const sync::Batch& batch : calls.given_up) table_->Apply(batch.items, nullptr);
    table_->AddDroppedUnits(calls.dropped_units);
    if (calls.calls.empty()) {
      std::move(done)(absl::OkStatus());
      return;
    }
    auto round = std::make_shared<Round>();
    round->context = sync::CallContext{
        .sequence_key = sequence_key_,
        .instance_id = instance_id_,
        .instances = instances,
        // Redis weighs sliding windows at its own time, unless the store's clock is not
        // Redis time (a simulated clock in tests and benchmarks).
        .weigh_at_micros = test_.use_redis_time ? 0 : clock_->NowMicros(),
    };
    round->calls = std::move(calls.calls);
    round->replies.resize(round->calls.size(), absl::UnavailableError("no reply"));
    round->outstanding.store(round->calls.size());
    round->done = std::move(done);
    round->sent_micros = clock_->NowMicros();
    for (size_t i = 0; i < round->calls.size(); ++i) SendCall(round, i);
  }

  // Call `i` of the round (sync::SendCall: EVALSHA, EVAL after NOSCRIPT).
  void SendCall(const std::shared_ptr<Round>& round, size_t i) {
    sync::SendCall(router_, script_sha_, round->context, round->calls[i], redis_commands_,
                   /*eval=*/false,
                   [self = shared_from_this(), round, i](absl::StatusOr<RedisReply> reply) {
                     round->replies[i] = std::move(reply);
                     if (round->outstanding.fetch_sub(1) == 1) self->FinishRound(*round);
                   });
  }

  // Every call answered: applies what came back; a failed call's batches wait for the next
  // round.
  void FinishRound(Round& round) {
    if (test_.before_reply_applied) test_.before_reply_applied();
    const int64_t received_micros = clock_->NowMicros();
    absl::Status status;
    for (size_t i = 0; i < round.calls.size(); ++i) {
      sync::SlotCall& call = round.calls[i];
      absl::StatusOr<sync::SlotReply> reply =
          round.replies[i].ok() ? sync::ParseReply(*round.replies[i], call)
                                : absl::StatusOr<sync::SlotReply>(round.replies[i].status());
      if (!reply.ok()) {
        if (status.ok()) status = reply.status();
        absl::MutexLock lock(&pending_mu_);
        pending_.Keep(std::move(call));
        continue;
      }
      SetOffset(reply->now_micros, round.sent_micros, received_micros);
      for (size_t b = 0; b + 1 < call.batches.size(); ++b) {
        table_->Apply(call.batches[b].items, nullptr);
      }
      table_->Apply(call.batches.back().items, &reply->counters);
    }
    if (status.ok()) {
      syncs_.fetch_add(1, std::memory_order_relaxed);
      table_->SetLastSync(received_micros);
    } else {
      sync_failures_.fetch_add(1, std::memory_order_relaxed);
    }
    std::move(round.done)(std::move(status));
  }

  const SyncStoreOptions options_;
  const sync::SyncStoreTestOptions test_;
  Clock* const clock_;
  const std::shared_ptr<RedisConnections> connections_;
  redis::Router& router_;
  const std::shared_ptr<Timers> timers_;
  const std::string script_sha_;
  const std::string instance_id_;
  const std::string sequence_key_;
  std::unique_ptr<sync::KeyTable> table_;
  // Set once by ScheduleRounds, before the store is handed out.
  std::unique_ptr<internal::TimerTask> task_;

  std::atomic<int64_t> syncs_{0};
  std::atomic<int64_t> sync_failures_{0};
  std::atomic<int64_t> redis_commands_{0};

  absl::Mutex round_mu_;
  bool round_running_ ABSL_GUARDED_BY(round_mu_) = false;  // one round at a time
  bool closing_ ABSL_GUARDED_BY(round_mu_) = false;
  bool last_round_started_ ABSL_GUARDED_BY(round_mu_) = false;
  absl::Notification closed_;  // the last round is over
  absl::Mutex pending_mu_;
  int64_t sequence_ ABSL_GUARDED_BY(pending_mu_) = 0;
  sync::PendingBatches pending_ ABSL_GUARDED_BY(pending_mu_);
};

// The core is shared with the rounds in flight, which may hold it after the store is gone;
// `core_` is the store's own reference. Its deleter decides where the core is destroyed: by
// the store's destructor, once every round has let go (off the connections' threads), or by
// the last round's callback (on them, where the store cannot wait for that callback).
class SyncStoreImpl final : public SyncStore {
 public:
  static std::unique_ptr<SyncStoreImpl> Wrap(std::unique_ptr<SyncCore> core) {
    auto release = std::make_shared<Release>();
    SyncCore* raw = core.release();
    std::shared_ptr<SyncCore> shared(raw, [release](SyncCore* last) {
      if (release->store_waits.load(std::memory_order_acquire)) {
        release->released.Notify();  // the store's destructor deletes it
      } else {
        delete last;
      }
    });
    return std::unique_ptr<SyncStoreImpl>(new SyncStoreImpl(std::move(shared), release));
  }

  ~SyncStoreImpl() override {
    core_->Close();
    SyncCore* const raw = core_.get();
    // Off the connections' threads, the last round's callbacks let go of the core soon (no
    // run starts after Close, which stops the rounds): this waits for them and destroys it
    // here. On them, the last callback does it.
    const bool wait = !core_->router().OnIoThread();
    release_->store_waits.store(wait, std::memory_order_release);
    core_.reset();
    if (!wait) return;
    release_->released.WaitForNotification();
    delete raw;
  }

  void ApplyAsync(std::vector<CheckItem> items, CheckCallback done) override {
    for (const CheckItem& item : items) {
      if (item.op != ItemOp::kCheck || !item.id.empty()) {
        std::move(done)(absl::UnimplementedError(absl::StrCat(
            "the sync store keeps no charges, reservations, leases or additions (limit '",
            item.limit != nullptr ? item.limit->name : "", "')")));
        return;
      }
    }
    std::move(done)(core_->table().Check(items));
  }
  absl::Status SyncNow() override { return core_->SyncNow(); }
  SyncStoreStats stats() const override { return core_->stats(); }

  SyncCore& core() { return *core_; }

 private:
  struct Release {
    std::atomic<bool> store_waits{false};
    absl::Notification released;  // the last reference went, and the store deletes the core
  };

  SyncStoreImpl(std::shared_ptr<SyncCore> core, std::shared_ptr<Release> release)
      : core_(std::move(core)), release_(std::move(release)) {}

  std::shared_ptr<SyncCore> core_;
  const std::shared_ptr<Release> release_;
};

}  // namespace

namespace sync {

absl::StatusOr<std::unique_ptr<SyncStore>> CreateSyncStore(SyncStoreOptions options,
                                                           SyncStoreTestOptions test) {
  if (options.redis == nullptr) {
    return absl::InvalidArgumentError("SyncStore needs connections (SyncStoreOptions::redis)");
  }
  if (options.max_keys < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("SyncStoreOptions.max_keys must be >= 1, got ", options.max_keys));
  }
  if (options.shards < 1 || options.shards > kMaxShards) {
    return absl::InvalidArgumentError(
        absl::StrCat("SyncStoreOptions.shards must be in 1..", kMaxShards));
  }
  int shards = 1;
  while (shards < options.shards) shards *= 2;

  std::shared_ptr<RedisConnections> connections = std::move(options.redis);
  options.redis = nullptr;  // the store holds them once
  // In a cluster this loads the script on one primary; the others get it from the EVAL that
  // follows their first NOSCRIPT.
  absl::StatusOr<RedisReply> loaded =
      redis::RouterOf(*connections).Command({"SCRIPT", "LOAD", std::string(redis::kLuaSync)});
  if (!loaded.ok()) return loaded.status();
  if (loaded->type != RedisReply::Type::kString) {
    return absl::InternalError(
        absl::StrCat("SCRIPT LOAD of the sync script failed: ", DebugString(*loaded)));
  }
  std::shared_ptr<Timers> timers = options.timers != nullptr ? options.timers : ThreadTimers();
  options.timers = nullptr;
  const bool schedule = test.schedule_rounds;
  std::unique_ptr<SyncStoreImpl> store = SyncStoreImpl::Wrap(std::make_unique<SyncCore>(
      std::move(options), std::move(test), std::move(connections), loaded->str, std::move(timers)));
  if (absl::Status status = store->core().Init(shards); !status.ok()) return status;
  if (schedule) store->core().ScheduleRounds();
  return store;
}

}  // namespace sync

absl::StatusOr<std::unique_ptr<SyncStore>> SyncStore::Create(SyncStoreOptions options) {
  return sync::CreateSyncStore(std::move(options), {});
}

}  // namespace tollgate
