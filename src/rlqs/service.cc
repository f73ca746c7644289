// Copyright tollgate authors. RlqsService's wiring: the streams' handlers report into the
// ledger; rounds run on the injected Timers, one at a time, their script calls sent over the
// fleet's Redis connections as sync mode sends its own (src/store/sync/sync_store.cc).
#include "src/rlqs/service.h"

#include <algorithm>
#include <atomic>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "src/core/timer_task.h"
#include "src/store/redis/lua_scripts.h"
#include "src/store/redis/redis_connections_impl.h"
#include "src/store/redis/router.h"
#include "src/store/sync/round.h"
#include "src/store/sync/send_call.h"

namespace tollgate::rlqs {

namespace {

std::string RandomInstanceId() {
  std::random_device random;
  std::mt19937_64 generator((static_cast<uint64_t>(random()) << 32) ^ random());
  return absl::StrCat(absl::Hex(generator(), absl::kZeroPad16));
}

}  // namespace

struct RlqsService::Core : std::enable_shared_from_this<Core> {
  Core(RlqsServiceOptions given, RedisConnections* redis)
      : options(std::move(given)),
        clock(options.clock != nullptr ? options.clock : &SystemClock()),
        timers(options.timers != nullptr ? options.timers : ThreadTimers()),
        ledger(options.ledger),
        router(redis != nullptr ? &redis::RouterOf(*redis) : nullptr) {}

  // One round's script calls and their replies as they come.
  struct Round {
    std::vector<sync::SlotCall> calls;
    std::vector<absl::StatusOr<redis::RedisReply>> replies;
    std::atomic<size_t> outstanding{0};
    int64_t sent_micros = 0;
    internal::TimerTask::Next next;
  };

  int64_t Instances() const {
    return std::max<int64_t>(1, options.instance_count ? options.instance_count() : 1);
  }
  int64_t NowMicros() const {
    return clock->NowMicros() + offset_micros.load(std::memory_order_relaxed);
  }
  void SetOffset(int64_t redis_micros, int64_t before, int64_t after) {
    offset_micros.store(redis_micros - (before + (after - before) / 2), std::memory_order_relaxed);
  }

  absl::Status LoadScript() {
    absl::StatusOr<redis::RedisReply> loaded =
        router->Command({"SCRIPT", "LOAD", std::string(redis::kLuaSync)});
    if (!loaded.ok()) return loaded.status();
    if (loaded->type != redis::RedisReply::Type::kString) {
      return absl::InternalError(
          absl::StrCat("SCRIPT LOAD of the sync script failed: ", DebugString(*loaded)));
    }
    script_sha = loaded->str;
    const int64_t before = clock->NowMicros();
    absl::StatusOr<redis::RedisReply> time = router->Command({"TIME"});
    const int64_t after = clock->NowMicros();
    int64_t seconds = 0, micros = 0;
    if (time.ok() && time->type == redis::RedisReply::Type::kArray && time->elements.size() == 2 &&
        absl::SimpleAtoi(time->elements[0].str, &seconds) &&
        absl::SimpleAtoi(time->elements[1].str, &micros)) {
      SetOffset(seconds * 1'000'000 + micros, before, after);
    }
    return absl::OkStatus();
  }

  void ScheduleRounds() {
    task = std::make_unique<internal::TimerTask>(
        timers, [weak = weak_from_this()](internal::TimerTask::Next next) {
          if (std::shared_ptr<Core> self = weak.lock()) {
            self->Run(std::move(next));
          } else {
            std::move(next)(0);
          }
        });
    absl::AnyInvocable<void()&&> start = task->Starter(options.ledger.round_micros);
    if (router != nullptr) {
      // On one of the connections' loops: the round, its calls and replies stay there.
      router->Post(std::move(start));
    } else {
      std::move(start)();
    }
  }

  void Run(internal::TimerTask::Next next) {
    const int64_t now = NowMicros();
    ledger.Rematch(options.check_service->snapshot(), now);
    if (router == nullptr) {
      Assign(/*store_ok=*/true);
      std::move(next)(NextDelay());
      return;
    }
    std::vector<sync::CounterItem> items = ledger.TakeCounters(timers->NowMicros(), now);
    sync::PendingBatches::Calls calls = pending.Take(++sequence, std::move(items), now);
    for (const sync::Batch& batch : calls.given_up) ledger.ApplyReplies(batch.items, nullptr);
    if (calls.calls.empty()) {
      Assign(/*store_ok=*/true);
      std::move(next)(NextDelay());
      return;
    }
    auto round = std::make_shared<Round>();
    round->calls = std::move(calls.calls);
    round->replies.resize(round->calls.size(), absl::UnavailableError("no reply"));
    round->outstanding.store(round->calls.size());
    round->next = std::move(next);
    round->sent_micros = clock->NowMicros();
    context.instances = Instances();
    for (size_t i = 0; i < round->calls.size(); ++i) Send(round, i);
  }

  // Call `i` of the round (sync::SendCall: EVALSHA, EVAL after NOSCRIPT).
  void Send(const std::shared_ptr<Round>& round, size_t i) {
    sync::SendCall(*router, script_sha, context, round->calls[i], redis_commands, /*eval=*/false,
                   [self = shared_from_this(), round, i](absl::StatusOr<redis::RedisReply> reply) {
                     round->replies[i] = std::move(reply);
                     if (round->outstanding.fetch_sub(1) == 1) self->Finish(*round);
                   });
  }

  // Every call answered: the replies applied (a failed call's batches wait for the next
  // round), then the assignments, at the fallback when a call failed.
  void Finish(Round& round) {
    const int64_t received = clock->NowMicros();
    bool ok = true;
    for (size_t i = 0; i < round.calls.size(); ++i) {
      sync::SlotCall& call = round.calls[i];
      absl::StatusOr<sync::SlotReply> reply =
          round.replies[i].ok() ? sync::ParseReply(*round.replies[i], call)
                                : absl::StatusOr<sync::SlotReply>(round.replies[i].status());
      if (!reply.ok()) {
        if (ok) spdlog::debug("rlqs: round failed: {}", std::string(reply.status().message()));
        ok = false;
        pending.Keep(std::move(call));
        continue;
      }
      SetOffset(reply->now_micros, round.sent_micros, received);
      for (size_t b = 0; b + 1 < call.batches.size(); ++b) {
        ledger.ApplyReplies(call.batches[b].items, nullptr);
      }
      ledger.ApplyReplies(call.batches.back().items, &reply->counters);
    }
    Assign(ok);
    std::move(round.next)(NextDelay());
  }

  // A round interval, or less when a fixed window starts sooner: its grants then go out
  // right after its start (what a bucket holds of the window before ends with it).
  int64_t NextDelay() const {
    const int64_t boundary = ledger.next_boundary_micros();
    const int64_t until =
        boundary > 0 ? boundary - NowMicros() + 1000 : options.ledger.round_micros;
    return std::clamp<int64_t>(until, 1000, options.ledger.round_micros);
  }

  // After the last round (the task stopped): what was reported and granted since is counted,
  // so that the other instances' grants leave room for it. Blocking, on the caller's thread.
  // REQUIRES: not on one of the connections' threads; no round running.
  void LastRound() {
    if (router == nullptr) return;
    const int64_t now = NowMicros();
    std::vector<sync::CounterItem> items = ledger.TakeCounters(timers->NowMicros(), now);
    sync::PendingBatches::Calls calls = pending.Take(++sequence, std::move(items), now);
    context.instances = Instances();
    for (const sync::SlotCall& call : calls.calls) {
      for (const char* verb : {"EVALSHA", "EVAL"}) {
        const bool eval = std::string_view(verb) == "EVAL";
        redis_commands.fetch_add(1, std::memory_order_relaxed);
        absl::StatusOr<redis::RedisReply> reply = router->Command(
            sync::ScriptCommand(verb, eval ? redis::kLuaSync : script_sha, context, call),
            call.slot);
        if (!reply.ok() || !reply->is_error() || !absl::StartsWith(reply->str, "NOSCRIPT")) break;
      }
    }
  }

  void Assign(bool store_ok) {
    RlqsAssignContext assign;
    assign.monotonic_micros = timers->NowMicros();
    assign.now_micros = NowMicros();
    assign.shared = router != nullptr;
    assign.store_ok = store_ok;
    assign.instances = Instances();
    assign.fallback_fraction = options.fallback_fraction;
    for (RlqsLedger::Outgoing& out : ledger.Assign(assign)) {
      out.writer->Write(std::move(out.message));
    }
  }

  const RlqsServiceOptions options;
  Clock* const clock;
  const std::shared_ptr<Timers> timers;
  RlqsLedger ledger;
  redis::Router* const router;
  std::string script_sha;
  std::atomic<int64_t> offset_micros{0};
  std::atomic<int64_t> redis_commands{0};
  std::unique_ptr<internal::TimerTask> task;
  // Touched by rounds only (one at a time).
  sync::CallContext context;
  int64_t sequence = 0;
  sync::PendingBatches pending;
};

namespace {

// One stream: its messages go to the ledger; it leaves the ledger when it closes. It holds the
// service's core weakly: a connection may outlive the service (and even the loops, whose
// destruction destroys what their pending handlers hold), and the core, which holds the
// loops' timers, must go with the service. Once it has, the stream's messages end it with
// UNAVAILABLE.
class RlqsStreamHandler final : public server::GrpcStreamHandler {
 public:
  RlqsStreamHandler(const std::shared_ptr<RlqsService::Core>& core,
                    std::shared_ptr<server::GrpcStreamWriter> writer)
      : core_(core), writer_(writer), id_(core->ledger.OpenStream(std::move(writer))) {}

  void OnMessage(std::string_view bytes) override {
    if (ended_) return;
    const std::shared_ptr<RlqsService::Core> core = core_.lock();
    if (core == nullptr) {
      End(absl::UnavailableError("the Rate Limit Quota Service is shutting down"));
      return;
    }
    RateLimitQuotaUsageReports reports;
    if (!reports.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      End(absl::InvalidArgumentError("the message is not a RateLimitQuotaUsageReports"));
      return;
    }
    absl::StatusOr<bool> subscribed =
        core->ledger.Report(id_, reports, core->options.check_service->snapshot(),
                            core->timers->NowMicros(), core->NowMicros());
    if (!subscribed.ok()) {
      End(subscribed.status());
      return;
    }
    // A new bucket gets its first assignment from a round that comes now.
    if (*subscribed && core->task != nullptr) core->task->RunWithin(0);
  }

  void OnHalfClose() override { End(absl::OkStatus()); }

  void OnClose() override {
    if (const std::shared_ptr<RlqsService::Core> core = core_.lock()) {
      core->ledger.CloseStream(id_);
    }
  }

 private:
  void End(const absl::Status& status) {
    ended_ = true;
    writer_->Finish(status);
  }

  const std::weak_ptr<RlqsService::Core> core_;
  const std::shared_ptr<server::GrpcStreamWriter> writer_;
  const RlqsLedger::StreamId id_;
  bool ended_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<RlqsService>> RlqsService::Start(RlqsServiceOptions options) {
  if (options.check_service == nullptr) {
    return absl::InvalidArgumentError("RLQS needs the check service");
  }
  if (options.ledger.round_micros < 1000 || options.ledger.idle_micros < 1000) {
    return absl::InvalidArgumentError("RLQS: the round and idle times must be at least 1 ms");
  }
  if (options.instance_id.empty()) options.instance_id = RandomInstanceId();
  std::shared_ptr<RedisConnections> redis = std::move(options.redis);
  auto core = std::make_shared<Core>(std::move(options), redis.get());
  if (core->router != nullptr) {
    if (absl::Status loaded = core->LoadScript(); !loaded.ok()) return loaded;
    core->context.instance_id = core->options.instance_id;
    core->context.sequence_key =
        absl::StrCat(core->options.ledger.key_prefix, "sync:", core->options.instance_id);
  }
  core->ScheduleRounds();
  return std::unique_ptr<RlqsService>(new RlqsService(std::move(core), std::move(redis)));
}

RlqsService::~RlqsService() {
  if (core_->task != nullptr) core_->task->StopAndWait();
  core_->LastRound();
}

void RlqsService::AddMethod(server::GrpcMethods& methods) {
  // Weakly, as the handlers (the server's methods live as long as its last connection).
  methods.AddStreaming(
      kStreamRateLimitQuotasPath,
      [weak = std::weak_ptr<Core>(core_)](std::shared_ptr<server::GrpcStreamWriter> writer)
          -> std::unique_ptr<server::GrpcStreamHandler> {
        const std::shared_ptr<Core> core = weak.lock();
        if (core == nullptr) return nullptr;  // the service is gone
        return std::make_unique<RlqsStreamHandler>(core, std::move(writer));
      });
}

server::RlqsStats RlqsService::stats() const {
  server::RlqsStats stats = core_->ledger.stats();
  stats.redis_commands = core_->redis_commands.load(std::memory_order_relaxed);
  return stats;
}

}  // namespace tollgate::rlqs
