// Copyright tollgate authors. Writes answered once a replica holds them: one connection per
// primary for them alone, and one Redis WAIT per group of writes sent together (group commit).
//
// WAIT blocks the connection it is sent on until the replicas acknowledge the connection's
// last write, or until its timeout. On a connection of their own, durable writes never hold up
// other checks; and with one WAIT out at a time, every write queued while it waits leaves in
// the next group, covered by the next one WAIT:
//
//   group k:   EVALSHA a, EVALSHA b, ..., WAIT 1 <ms>    (one write to the socket)
//   while WAIT k is out, c, d, ... queue here
//   WAIT k returns: a, b, ... are answered; group k+1 = c, d, ..., WAIT 1 <ms>
//
// A reply is held until its group's WAIT returns: with a replica (≥ 1), it goes to its callback
// as it came; with none in time, or an error reply, its callback gets UnconfirmedWriteError (the
// write stays on the primary); when the connection is lost, its Unavailable. A reply that wrote
// nothing (DurableSend::wrote), an error reply or a failure is answered at once. Each command's
// time is kept by a timer here, not by the WAIT's own timeout, which Redis notices only at its next
// event loop turn (up to 1000 / hz ms late): a held reply whose time is up is answered
// UnconfirmedWriteError, and a command still queued behind a WAIT when its time is up is answered
// so without being sent.
#ifndef TOLLGATE_SRC_STORE_REDIS_DURABLE_WRITES_H_
#define TOLLGATE_SRC_STORE_REDIS_DURABLE_WRITES_H_

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "src/store/redis/connection.h"
#include "src/store/redis/resp.h"
#include "tollgate/redis_store.h"
#include "tollgate/resilience.h"

namespace tollgate::redis {

// How one durable command is sent.
struct DurableSend {
  // The caller's time for the answer, from DurableWrites::Send: the WAIT that covers the
  // command is given what is left of it less a margin (a fifth, at least 1 ms) for the answer
  // to come back, and a command that would have less than 1 ms to wait is not sent but
  // answered UnconfirmedWriteError. REQUIRES: > 0.
  int64_t timeout_micros = 10'000;
  // Whether a (non-error) reply wrote what a replica must hold; false answers it at once (a
  // refusal). Called at most once, on the I/O thread, before the reply is held; it may keep
  // what it read of the reply for the command's callback (which of a batch's requests wrote).
  // Empty: every reply that is not an error waits.
  std::function<bool(const RedisReply& reply)> wrote;
};

// The counts of every DurableWrites of one set of connections, and the log of their state
// per primary (replicas confirming or not). Thread-safe.
class DurableWaitMonitor {
 public:
  // Where kReplicasNotConfirming and kReplicasConfirming go; nullptr: nowhere.
  void set_on_event(ResilienceEventCallback on_event);

  // One WAIT of `address` returned after `micros`, with a replica's confirmation or not
  // (`why`), answering `writes` held calls. Emits an event when the primary's state changes.
  void RecordWait(const std::string& address, int64_t micros, bool confirmed, int64_t writes,
                  std::string_view why);
  // `writes` held calls of `address` answered unconfirmed before their WAIT returned (their
  // time was up).
  void RecordUnconfirmed(const std::string& address, int64_t writes, std::string_view why);
  DurableWaitStats Snapshot() const;

 private:
  // Emits an event when `address`'s state changes to `confirmed`.
  void Report(const std::string& address, bool confirmed, std::string_view why);

  mutable absl::Mutex mu_;
  DurableWaitStats stats_ ABSL_GUARDED_BY(mu_);
  // Per primary: whether its last WAIT was confirmed. Absent: confirming (nothing to report).
  absl::flat_hash_map<std::string, bool> confirming_ ABSL_GUARDED_BY(mu_);
  ResilienceEventCallback on_event_ ABSL_GUARDED_BY(mu_);
};

// One connection to one node for durable writes, on `io`'s thread. Thread-safe except where
// noted; callbacks run on the I/O thread (inline from Send only when failing fast).
class DurableWrites {
 public:
  DurableWrites(boost::asio::io_context& io, ConnectionOptions options,
                std::shared_ptr<DurableWaitMonitor> monitor);
  DurableWrites(const DurableWrites&) = delete;
  DurableWrites& operator=(const DurableWrites&) = delete;
  // REQUIRES: Shutdown() has run and the io_context no longer runs (see RedisConnection).
  ~DurableWrites();

  // Starts connecting; commands sent meanwhile wait for the first attempt's end.
  void Start();
  // Queues `command` (RESP) for the next group. Unavailable at once when shut down, or when
  // the connection is down at the group's turn.
  void Send(std::string_view command, const DurableSend& how, ReplyCallback done);
  // Closes for good; what is queued or out fails with Unavailable. REQUIRES: on the I/O
  // thread.
  void Shutdown();

 private:
  using SteadyTime = std::chrono::steady_clock::time_point;
  struct Queued {
    std::string command;
    ReplyCallback done;
    std::function<bool(const RedisReply& reply)> wrote;
    SteadyTime wait_deadline;  // when its time for a replica is up (DurableSend::timeout_micros)
  };
  struct Group;

  // Flush() on the I/O thread: at the end of the running handler, else posted.
  void ScheduleFlush();
  // Sends the queued commands and their WAIT, unless a WAIT is out. I/O thread.
  void Flush();
  void OnWaitReply(const std::shared_ptr<Group>& group, SteadyTime sent,
                   absl::StatusOr<RedisReply> reply);
  // Answers what is held or queued past its time, and arms the timer for the next one. I/O
  // thread.
  void Expire();

  boost::asio::io_context& io_;
  const std::string address_;
  const std::shared_ptr<DurableWaitMonitor> monitor_;
  RedisConnection connection_;
  // I/O thread only: the group whose WAIT is out, and the timer of the earliest deadline.
  std::shared_ptr<Group> current_;
  boost::asio::steady_timer timer_;

  absl::Mutex mu_;
  std::vector<Queued> queued_ ABSL_GUARDED_BY(mu_);
  bool flush_scheduled_ ABSL_GUARDED_BY(mu_) = false;
  bool waiting_ ABSL_GUARDED_BY(mu_) = false;  // a WAIT is out
  bool started_ ABSL_GUARDED_BY(mu_) = false;  // the first connection attempt has ended
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // When the timer fires next (SteadyTime::max(): not armed): a command queued with an
  // earlier deadline arms it again.
  SteadyTime armed_at_ ABSL_GUARDED_BY(mu_) = SteadyTime::max();
};

}  // namespace tollgate::redis

#endif  // TOLLGATE_SRC_STORE_REDIS_DURABLE_WRITES_H_
