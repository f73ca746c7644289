// Copyright tollgate authors.
#include "src/store/redis/durable_writes.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/net/handler_scope.h"
#include "tollgate/store.h"

namespace tollgate::redis {
namespace {

using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::milliseconds;

// What a WAIT may take of a command's time: all but a fifth (at least 1 ms), left for its
// answer to reach the caller before the caller's own deadline does.
microseconds WaitBudget(int64_t timeout_micros) {
  const int64_t margin = std::max<int64_t>(1'000, timeout_micros / 5);
  return microseconds(timeout_micros - margin);
}

}  // namespace

void DurableWaitMonitor::set_on_event(ResilienceEventCallback on_event) {
  absl::MutexLock lock(&mu_);
  on_event_ = std::move(on_event);
}

void DurableWaitMonitor::RecordWait(const std::string& address, int64_t micros, bool confirmed,
                                    int64_t writes, std::string_view why) {
  {
    absl::MutexLock lock(&mu_);
    ++stats_.waits;
    (confirmed ? stats_.calls_confirmed : stats_.calls_unconfirmed) += writes;
    if (!confirmed) ++stats_.wait_timeouts;
    micros = std::max<int64_t>(micros, 0);
    const auto bound = std::lower_bound(kStoreRoundTripBucketsMicros.begin(),
                                        kStoreRoundTripBucketsMicros.end(), micros);
    ++stats_.wait_latency.counts[bound - kStoreRoundTripBucketsMicros.begin()];
    ++stats_.wait_latency.count;
    stats_.wait_latency.sum_micros += micros;
  }
  // A WAIT that confirmed nothing held (every call answered before it returned) says little.
  if (confirmed && writes == 0) return;
  Report(address, confirmed, why);
}

void DurableWaitMonitor::RecordUnconfirmed(const std::string& address, int64_t writes,
                                           std::string_view why) {
  {
    absl::MutexLock lock(&mu_);
    stats_.calls_unconfirmed += writes;
  }
  Report(address, false, why);
}

void DurableWaitMonitor::Report(const std::string& address, bool confirmed, std::string_view why) {
  ResilienceEventCallback on_event;
  {
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = confirming_.try_emplace(address, true);
    if (it->second == confirmed) return;
    it->second = confirmed;
    if (!on_event_) return;
    on_event = on_event_;
  }
  ResilienceEvent event;
  event.kind = confirmed ? ResilienceEvent::Kind::kReplicasConfirming
                         : ResilienceEvent::Kind::kReplicasNotConfirming;
  event.detail = confirmed ? absl::StrCat("primary ", address)
                           : absl::StrCat("primary ", address, ": ", std::string(why));
  on_event(event);
}

DurableWaitStats DurableWaitMonitor::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

// One group: the commands sent before one WAIT, whose replies it holds until it returns.
// Touched on the I/O thread only.
struct DurableWrites::Group {
  struct Held {
    RedisReply reply;
    ReplyCallback done;
    SteadyTime wait_deadline;
  };
  std::vector<Held> held;
  // Of every command sent, replied or not: when the timer must look at the group again.
  std::vector<SteadyTime> wait_deadlines;
};

DurableWrites::DurableWrites(boost::asio::io_context& io, ConnectionOptions options,
                             std::shared_ptr<DurableWaitMonitor> monitor)
    : io_(io),
      address_(absl::StrCat(options.url.host, ":", options.url.port)),
      monitor_(std::move(monitor)),
      connection_(io, std::move(options)),
      timer_(io) {}

DurableWrites::~DurableWrites() = default;

void DurableWrites::Start() {
  connection_.Start([this](const absl::Status&) {
    {
      absl::MutexLock lock(&mu_);
      started_ = true;
    }
    Flush();  // what queued meanwhile: sent, or failed if the attempt failed
  });
}

void DurableWrites::Send(std::string_view command, const DurableSend& how, ReplyCallback done) {
  bool schedule = false;
  bool expire_sooner = false;
  {
    absl::ReleasableMutexLock lock(&mu_);
    if (closed_) {
      lock.Release();
      std::move(done)(absl::UnavailableError("the Redis store is shutting down"));
      return;
    }
    const SteadyTime wait_deadline =
        std::chrono::steady_clock::now() + WaitBudget(how.timeout_micros);
    queued_.push_back(Queued{std::string(command), std::move(done), how.wrote, wait_deadline});
    schedule = started_ && !waiting_ && !flush_scheduled_;
    flush_scheduled_ = flush_scheduled_ || schedule;
    // Behind a WAIT, its time is kept by the timer.
    expire_sooner = waiting_ && wait_deadline < armed_at_;
    if (expire_sooner) armed_at_ = wait_deadline;
  }
  if (schedule) ScheduleFlush();
  if (expire_sooner) boost::asio::post(io_, [this] { Expire(); });
}

void DurableWrites::ScheduleFlush() {
  // Inside a handler on this loop (the read of a WAIT's reply, whose callbacks send the next
  // writes), everything queued by the handler leaves in one group when it returns.
  net::HandlerScope::Work flush = [this] { Flush(); };
  if (net::HandlerScope::Defer(io_, flush)) return;
  boost::asio::post(io_, [flush = std::move(flush)]() mutable { std::move(flush)(); });
}

void DurableWrites::Flush() {
  std::vector<Queued> group_commands;
  {
    absl::MutexLock lock(&mu_);
    flush_scheduled_ = false;
    if (closed_ || waiting_ || !started_ || queued_.empty()) return;
    group_commands.swap(queued_);
    waiting_ = true;
  }
  const SteadyTime now = std::chrono::steady_clock::now();
  const bool ready = connection_.ready();
  auto group = std::make_shared<Group>();
  SteadyTime wait_until = SteadyTime::max();
  size_t sent = 0;
  for (Queued& queued : group_commands) {
    if (!ready) {
      std::move(queued.done)(absl::UnavailableError(
          absl::StrCat("not connected to Redis at ", address_, " (durable writes)")));
      continue;
    }
    if (queued.wait_deadline - now < milliseconds(1)) {
      // Its time went waiting for the previous group's WAIT: not written, nothing spent.
      std::move(queued.done)(UnconfirmedWriteError(
          absl::StrCat("no time left to wait for a replica of Redis at ", address_,
                       " (the previous WAIT for durable writes took it); not written")));
      continue;
    }
    wait_until = std::min(wait_until, queued.wait_deadline);
    group->wait_deadlines.push_back(queued.wait_deadline);
    connection_.Send(
        queued.command,
        [this, group, wrote = std::move(queued.wrote), wait_deadline = queued.wait_deadline,
         done = std::move(queued.done)](absl::StatusOr<RedisReply> reply) mutable {
          if (!reply.ok() || reply->is_error() || (wrote != nullptr && !wrote(*reply))) {
            std::move(done)(std::move(reply));
            return;
          }
          if (std::chrono::steady_clock::now() >= wait_deadline) {
            // Written too late for any WAIT to confirm it in time.
            monitor_->RecordUnconfirmed(address_, 1, "the write's reply came after its time");
            std::move(done)(UnconfirmedWriteError(absl::StrCat(
                "no replica of Redis at ", address_, " acknowledged the write in time (WAIT)")));
            return;
          }
          group->held.push_back({*std::move(reply), std::move(done), wait_deadline});
        });
    ++sent;
  }
  if (sent == 0) {
    bool more = false;
    {
      absl::MutexLock lock(&mu_);
      waiting_ = false;
      more = !queued_.empty() && !flush_scheduled_;
      flush_scheduled_ = flush_scheduled_ || more;
    }
    if (more) ScheduleFlush();
    return;
  }
  current_ = group;
  // WAIT 0 would wait forever: at least 1 ms (every command sent has that much left). Redis
  // may answer it late; Expire answers each held reply at its own time.
  const int64_t wait_ms =
      std::max<int64_t>(1, duration_cast<milliseconds>(wait_until - now).count());
  connection_.Send(FormatCommand({"WAIT", "1", std::to_string(wait_ms)}),
                   [this, group, now](absl::StatusOr<RedisReply> reply) {
                     OnWaitReply(group, now, std::move(reply));
                   });
  Expire();
}

void DurableWrites::OnWaitReply(const std::shared_ptr<Group>& group, SteadyTime sent,
                                absl::StatusOr<RedisReply> reply) {
  const bool confirmed =
      reply.ok() && reply->type == RedisReply::Type::kInteger && reply->integer >= 1;
  std::string why;
  if (!reply.ok()) {
    why = std::string(reply.status().message());
  } else if (reply->is_error()) {
    why = absl::StrCat("Redis at ", address_, " refused WAIT: ", reply->str);
  } else if (!confirmed) {
    why = absl::StrCat("no replica of Redis at ", address_,
                       " acknowledged the write within the WAIT's timeout");
  }
  std::vector<Group::Held> held;
  held.swap(group->held);
  if (current_ == group) current_ = nullptr;
  monitor_->RecordWait(address_,
                       duration_cast<microseconds>(std::chrono::steady_clock::now() - sent).count(),
                       confirmed, static_cast<int64_t>(held.size()), why);
  // The next group may go as soon as the callbacks below queue it: at the end of this read.
  bool more = false;
  {
    absl::MutexLock lock(&mu_);
    waiting_ = false;
    more = !queued_.empty() && !flush_scheduled_;
    flush_scheduled_ = flush_scheduled_ || more;
  }
  for (Group::Held& write : held) {
    if (confirmed) {
      std::move(write.done)(std::move(write.reply));
    } else if (!reply.ok()) {
      // The connection went: whether the store is still there is for its caller to find out.
      std::move(write.done)(reply.status());
    } else {
      std::move(write.done)(UnconfirmedWriteError(why));
    }
  }
  if (more) ScheduleFlush();
}

void DurableWrites::Expire() {
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
  }
  const SteadyTime now = std::chrono::steady_clock::now();
  SteadyTime next = SteadyTime::max();
  std::vector<ReplyCallback> unconfirmed;
  if (current_ != nullptr) {
    std::erase_if(current_->held, [&](Group::Held& write) {
      if (write.wait_deadline > now) return false;
      unconfirmed.push_back(std::move(write.done));
      return true;
    });
    for (SteadyTime deadline : current_->wait_deadlines) {
      if (deadline > now) next = std::min(next, deadline);
    }
  }
  std::vector<ReplyCallback> not_sent;
  {
    absl::MutexLock lock(&mu_);
    std::erase_if(queued_, [&](Queued& queued) {
      if (queued.wait_deadline - now >= milliseconds(1)) {
        next = std::min(next, queued.wait_deadline - milliseconds(1));
        return false;
      }
      not_sent.push_back(std::move(queued.done));
      return true;
    });
    armed_at_ = next;
  }
  if (!unconfirmed.empty()) {
    monitor_->RecordUnconfirmed(
        address_, static_cast<int64_t>(unconfirmed.size()),
        absl::StrCat("no replica of Redis at ", address_, " acknowledged the write in time"));
  }
  for (ReplyCallback& done : unconfirmed) {
    std::move(done)(UnconfirmedWriteError(absl::StrCat("no replica of Redis at ", address_,
                                                       " acknowledged the write in time (WAIT)")));
  }
  for (ReplyCallback& done : not_sent) {
    std::move(done)(UnconfirmedWriteError(
        absl::StrCat("no time left to wait for a replica of Redis at ", address_,
                     " (the previous WAIT for durable writes took it); not written")));
  }
  if (next == SteadyTime::max()) {
    timer_.cancel();
    return;
  }
  timer_.expires_at(next);
  timer_.async_wait([this](const boost::system::error_code& error) {
    if (!error) Expire();
  });
}

void DurableWrites::Shutdown() {
  std::vector<Queued> queued;
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    queued.swap(queued_);
  }
  timer_.cancel();
  connection_.Shutdown();  // fails the commands out, and their WAIT
  for (Queued& command : queued) {
    std::move(command.done)(absl::UnavailableError("the Redis store is shutting down"));
  }
}

}  // namespace tollgate::redis
