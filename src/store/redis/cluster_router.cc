// Copyright tollgate authors. Routing by hash slot in a Redis Cluster.
//
// Every node of the slot map (primaries and replicas, so that a promoted replica is
// already connected) gets a ConnectionPool on the router's one I/O thread. A command goes
// to the pool that slots_[slot] names; redirects are followed on the I/O thread. The slot
// map is read with CLUSTER SLOTS from any connected node: at start, every
// `refresh_interval`, and soon after a MOVED, a lost connection or CLUSTERDOWN.
//
// Pools are never destroyed while the I/O thread runs (a RedisConnection must outlive its
// handlers): a node that leaves the map is shut down and kept in `retired_` until the
// router goes, so a pointer read from slots_ by another thread always stays valid.
#include <array>
#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "src/store/redis/refresh_scheduler.h"
#include "src/store/redis/router.h"
#include "src/store/redis/slot.h"

namespace tollgate::redis {
namespace {

namespace asio = boost::asio;
using SteadyClock = std::chrono::steady_clock;

// Redirects (MOVED, ASK) one call follows before giving up.
constexpr int kMaxRedirects = 16;
// Pause before resending after TRYAGAIN, or after ASK when not following it.
constexpr std::chrono::milliseconds kMigrationRetryPause{2};

// "host:port" (the host may be an IPv6 address with colons, or empty: `default_host`).
bool ParseAddress(std::string_view text, const std::string& default_host, HostPort* out) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return false;
  int port = 0;
  if (!absl::SimpleAtoi(absl::string_view(text.data() + colon + 1, text.size() - colon - 1),
                        &port)) {
    return false;
  }
  out->host = colon == 0 ? default_host : std::string(text.substr(0, colon));
  out->port = port;
  return true;
}

// "MOVED 3999 127.0.0.1:6381" or "ASK 3999 127.0.0.1:6381" -> the address.
bool ParseRedirect(std::string_view error, const std::string& default_host, HostPort* out) {
  const size_t space = error.rfind(' ');
  if (space == std::string_view::npos) return false;
  return ParseAddress(error.substr(space + 1), default_host, out);
}

std::string HostOf(const std::string& address) { return address.substr(0, address.rfind(':')); }

class ClusterRouter final : public Router {
 public:
  ClusterRouter(const RedisTarget& target, const RouterOptions& options)
      : target_(target),
        options_(options),
        refresher_(io_thread_.io(), options, [this] { Refresh(); }) {
    for (auto& slot : slots_) slot.store(nullptr, std::memory_order_relaxed);
  }

  ~ClusterRouter() override {
    io_thread_.Stop([this] {
      stopping_ = true;
      refresher_.Stop();
      std::map<uint64_t, PendingRetry> retries;
      retries.swap(retries_);
      for (auto& [id, retry] : retries) {
        retry.timer->cancel();
        Finish(retry.call, absl::UnavailableError("the Redis store is shutting down"));
      }
      absl::MutexLock lock(&mu_);
      for (auto& [address, pool] : pools_) pool->Shutdown();
    });
  }

  absl::Status Start() {
    std::vector<ConnectionPool*> seeds;
    for (const HostPort& seed : target_.seeds) seeds.push_back(PoolFor(seed));
    absl::Status first_error;
    bool any_ready = false;
    for (ConnectionPool* seed : seeds) {
      absl::Status status = seed->AwaitStarted();
      if (status.ok()) any_ready = true;
      if (!status.ok() && first_error.ok()) first_error = status;
    }
    if (!any_ready) return first_error;
    std::promise<absl::Status> refreshed;
    asio::post(io_thread_.io(), [this, &refreshed] {
      refresher_.RefreshNow(
          [&refreshed](const absl::Status& status) { refreshed.set_value(status); });
    });
    absl::Status status = refreshed.get_future().get();
    if (!status.ok()) return status;
    std::vector<ConnectionPool*> primaries;
    {
      absl::MutexLock lock(&mu_);
      primaries = primary_pools_;
    }
    // Wait for the primaries' first attempts, so the first checks find them connected. A
    // primary that cannot be reached now is not fatal: its slots fail until it or its
    // replica answers.
    for (ConnectionPool* pool : primaries) (void)pool->AwaitStarted();
    asio::post(io_thread_.io(), [this] { refresher_.ArmPeriodic(); });
    return absl::OkStatus();
  }

  void Send(int slot, std::string formatted_command, ReplyCallback done, bool follow_ask) override {
    if (slot == kAnySlot) {
      // Spread keyless commands over the primaries.
      slot = static_cast<int>((next_any_.fetch_add(1, std::memory_order_relaxed) * 4099) %
                              kClusterSlots);
    }
    auto call = std::make_shared<Call>();
    call->slot = slot;
    call->command = std::move(formatted_command);
    call->done = std::move(done);
    call->follow_ask = follow_ask;
    call->started = SteadyClock::now();
    Dispatch(call, slots_[slot].load(std::memory_order_acquire), false);
  }

  void SendDurable(int slot, std::string formatted_command, const DurableSend& how,
                   ReplyCallback done) override {
    auto call = std::make_shared<Call>();
    call->slot = slot;
    call->command = std::move(formatted_command);
    call->done = std::move(done);
    // Its WAIT must follow it on one connection: an ASK (to another node, for one command) is
    // waited out instead.
    call->follow_ask = false;
    call->durable = how;
    call->started = SteadyClock::now();
    Dispatch(call, slots_[slot].load(std::memory_order_acquire), false);
  }

  void Post(absl::AnyInvocable<void() &&> task) override { io_thread_.Post(std::move(task)); }
  bool OnIoThread() const override { return io_thread_.InThisThread(); }

  int ReadyConnections() const override {
    absl::MutexLock lock(&mu_);
    int ready = 0;
    for (const ConnectionPool* pool : primary_pools_) ready += pool->ReadyConnections();
    return ready;
  }

  Topology topology() const override { return Topology::kCluster; }

  std::vector<std::string> Primaries() const override {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> out;
    for (const ConnectionPool* pool : primary_pools_) out.push_back(pool->address());
    return out;
  }

 private:
  struct Call {
    int slot = 0;
    std::string command;
    ReplyCallback done;
    bool follow_ask = true;
    std::optional<DurableSend> durable;  // sent with SendDurable
    SteadyClock::time_point started;
    int redirects = 0;
  };
  struct PendingRetry {
    std::unique_ptr<asio::steady_timer> timer;
    std::shared_ptr<Call> call;
  };

  static void Finish(const std::shared_ptr<Call>& call, absl::StatusOr<RedisReply> reply) {
    if (call->done) {
      ReplyCallback done = std::move(call->done);
      call->done = nullptr;
      std::move(done)(std::move(reply));
    }
  }

  bool PastDeadline(const Call& call) const {
    return SteadyClock::now() - call.started > options_.client.connection.reply_timeout;
  }

  void Dispatch(const std::shared_ptr<Call>& call, ConnectionPool* pool, bool asking) {
    if (pool == nullptr) {
      refresher_.Request();
      Finish(call, absl::UnavailableError(
                       absl::StrCat("no Redis Cluster node is known to serve slot ", call->slot)));
      return;
    }
    ReplyCallback on_reply = [this, call, pool](absl::StatusOr<RedisReply> reply) {
      OnReply(call, pool, std::move(reply));
    };
    if (asking) {
      pool->SendAsking(call->command, std::move(on_reply));
    } else if (call->durable.has_value()) {
      pool->SendDurable(call->command, *call->durable, std::move(on_reply));
    } else {
      pool->Send(call->command, std::move(on_reply));
    }
  }

  void OnReply(const std::shared_ptr<Call>& call, ConnectionPool* pool,
               absl::StatusOr<RedisReply> reply) {
    if (!reply.ok()) {
      refresher_.Request();
      Finish(call, std::move(reply));
      return;
    }
    if (!reply->is_error()) {
      Finish(call, std::move(reply));
      return;
    }
    const std::string& error = reply->str;
    if (absl::StartsWith(error, "MOVED ") || absl::StartsWith(error, "ASK ")) {
      // Only on the I/O thread: replies are read there.
      HostPort to;
      if (!ParseRedirect(error, HostOf(pool->address()), &to)) {
        Finish(call, absl::InternalError(absl::StrCat("unreadable redirect: ", error)));
        return;
      }
      const bool wait_for_migration = error[0] == 'A' && !call->follow_ask;
      if (wait_for_migration) {
        // Bounded by the deadline only: the slot may take a while to move.
        RetryLater(call, pool);
        return;
      }
      ConnectionPool* target = PoolFor(to);
      if (++call->redirects > kMaxRedirects || PastDeadline(*call)) {
        Finish(call, absl::UnavailableError(absl::StrCat("Redis Cluster: slot ", call->slot,
                                                         " still redirected (", error, ") after ",
                                                         call->redirects, " redirects")));
        return;
      }
      if (error[0] == 'M') {
        slots_[call->slot].store(target, std::memory_order_release);
        refresher_.Request();
        Dispatch(call, target, false);
      } else {
        Dispatch(call, target, true);
      }
      return;
    }
    if (absl::StartsWith(error, "TRYAGAIN")) {
      RetryLater(call, nullptr);
      return;
    }
    if (absl::StartsWith(error, "CLUSTERDOWN") || absl::StartsWith(error, "READONLY") ||
        absl::StartsWith(error, "MASTERDOWN") || absl::StartsWith(error, "LOADING")) {
      refresher_.Request();
      Finish(call, absl::UnavailableError(
                       absl::StrCat("Redis Cluster node ", pool->address(), ": ", error)));
      return;
    }
    Finish(call, std::move(reply));
  }

  // Resends after a short pause, to `pool` or (nullptr) to the slot's node then.
  void RetryLater(const std::shared_ptr<Call>& call, ConnectionPool* pool) {
    if (PastDeadline(*call) || stopping_) {
      Finish(call, absl::UnavailableError(absl::StrCat(
                       "Redis Cluster: slot ", call->slot, " is being migrated; no answer within ",
                       options_.client.connection.reply_timeout.count(), " ms")));
      return;
    }
    const uint64_t id = next_retry_id_++;
    PendingRetry& retry = retries_[id];
    retry.timer = std::make_unique<asio::steady_timer>(io_thread_.io(), kMigrationRetryPause);
    retry.call = call;
    retry.timer->async_wait([this, id, pool](const boost::system::error_code& error) {
      auto it = retries_.find(id);
      if (error || it == retries_.end()) return;
      std::shared_ptr<Call> call = std::move(it->second.call);
      retries_.erase(it);
      Dispatch(call, pool != nullptr ? pool : slots_[call->slot].load(std::memory_order_acquire),
               false);
    });
  }

  // The pool for a node, created (and connecting) on first use. Thread-safe.
  ConnectionPool* PoolFor(const HostPort& node) {
    const std::string address = absl::StrCat(node.host, ":", node.port);
    absl::MutexLock lock(&mu_);
    auto it = pools_.find(address);
    if (it != pools_.end()) return it->second.get();
    ClientOptions client = options_.client;
    client.connection.url = target_.node;
    client.connection.url.host = node.host;
    client.connection.url.port = node.port;
    client.connection.url.db = 0;
    auto pool = std::make_unique<ConnectionPool>(io_thread_.io(), client,
                                                 /*with_ask_connection=*/true);
    ConnectionPool* raw = pool.get();
    pools_.emplace(address, std::move(pool));
    raw->Start();
    return raw;
  }

  // One refresh, started by refresher_ and ended with refresher_.Finish(): reads CLUSTER
  // SLOTS from the first node that answers: ready primaries first, then the other known
  // nodes, then the seeds.
  void Refresh() {
    auto candidates = std::make_shared<std::vector<ConnectionPool*>>();
    {
      absl::MutexLock lock(&mu_);
      absl::flat_hash_set<ConnectionPool*> seen;
      for (ConnectionPool* pool : primary_pools_) {
        if (pool->ReadyConnections() > 0 && seen.insert(pool).second) candidates->push_back(pool);
      }
      for (auto& [address, pool] : pools_) {
        if (seen.insert(pool.get()).second) candidates->push_back(pool.get());
      }
    }
    TryRefreshFrom(candidates, 0);
  }

  void TryRefreshFrom(const std::shared_ptr<std::vector<ConnectionPool*>>& candidates,
                      size_t index) {
    if (stopping_) {
      refresher_.Finish(absl::UnavailableError("the Redis store is shutting down"));
      return;
    }
    if (index >= candidates->size()) {
      refresher_.Finish(absl::UnavailableError(
          "no Redis Cluster node answered CLUSTER SLOTS (are the seed addresses right, and is "
          "cluster mode enabled?)"));
      return;
    }
    ConnectionPool* pool = (*candidates)[index];
    pool->Send(FormatCommand({"CLUSTER", "SLOTS"}),
               [this, candidates, index, pool](absl::StatusOr<RedisReply> reply) {
                 if (reply.ok() && reply->type == RedisReply::Type::kArray &&
                     !reply->elements.empty() && ApplySlots(*reply, HostOf(pool->address()))) {
                   refresher_.Finish(absl::OkStatus());
                   return;
                 }
                 if (reply.ok() && reply->is_error() && candidates->size() == 1) {
                   refresher_.Finish(absl::FailedPreconditionError(absl::StrCat(
                       "Redis at ", pool->address(), " refused CLUSTER SLOTS: ", reply->str)));
                   return;
                 }
                 TryRefreshFrom(candidates, index + 1);
               });
  }

  // Installs a CLUSTER SLOTS reply: [[start, end, [host, port, id...], replicas...]...].
  // False (nothing changed) if it is malformed.
  bool ApplySlots(const RedisReply& reply, const std::string& default_host) {
    auto owners = std::make_unique<std::array<ConnectionPool*, kClusterSlots>>();
    owners->fill(nullptr);
    std::vector<ConnectionPool*> primaries;
    absl::flat_hash_set<ConnectionPool*> keep;
    for (const RedisReply& range : reply.elements) {
      if (range.type != RedisReply::Type::kArray || range.elements.size() < 3 ||
          range.elements[0].type != RedisReply::Type::kInteger ||
          range.elements[1].type != RedisReply::Type::kInteger) {
        return false;
      }
      const int64_t first = range.elements[0].integer;
      const int64_t last = range.elements[1].integer;
      if (first < 0 || last >= kClusterSlots || first > last) return false;
      ConnectionPool* primary = nullptr;
      for (size_t i = 2; i < range.elements.size(); ++i) {
        const RedisReply& node = range.elements[i];
        if (node.type != RedisReply::Type::kArray || node.elements.size() < 2 ||
            node.elements[1].type != RedisReply::Type::kInteger) {
          return false;
        }
        HostPort address;
        address.host = node.elements[0].str;
        if (address.host.empty() || address.host == "?") address.host = default_host;
        address.port = static_cast<int>(node.elements[1].integer);
        ConnectionPool* pool = PoolFor(address);
        keep.insert(pool);
        if (i == 2) primary = pool;
      }
      for (int64_t slot = first; slot <= last; ++slot) (*owners)[slot] = primary;
      if (std::find(primaries.begin(), primaries.end(), primary) == primaries.end()) {
        primaries.push_back(primary);
      }
    }
    for (int slot = 0; slot < kClusterSlots; ++slot) {
      slots_[slot].store((*owners)[slot], std::memory_order_release);
    }
    std::vector<std::string> seeds;
    for (const HostPort& seed : target_.seeds)
      seeds.push_back(absl::StrCat(seed.host, ":", seed.port));
    absl::MutexLock lock(&mu_);
    primary_pools_ = std::move(primaries);
    for (auto it = pools_.begin(); it != pools_.end();) {
      const bool seed = std::find(seeds.begin(), seeds.end(), it->first) != seeds.end();
      if (keep.contains(it->second.get()) || seed) {
        ++it;
        continue;
      }
      it->second->Shutdown();
      retired_.push_back(std::move(it->second));
      pools_.erase(it++);
    }
    return true;
  }

  // First, so that it is destroyed last (after the timers and pools that use its io).
  IoThread io_thread_;
  const RedisTarget target_;
  const RouterOptions options_;
  std::array<std::atomic<ConnectionPool*>, kClusterSlots> slots_;
  std::atomic<uint64_t> next_any_{0};

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<ConnectionPool>> pools_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<ConnectionPool>> retired_ ABSL_GUARDED_BY(mu_);
  std::vector<ConnectionPool*> primary_pools_ ABSL_GUARDED_BY(mu_);

  // Only touched on the I/O thread.
  bool stopping_ = false;
  RefreshScheduler refresher_;
  std::map<uint64_t, PendingRetry> retries_;
  uint64_t next_retry_id_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Router>> ConnectClusterRouter(const RedisTarget& target,
                                                             const RouterOptions& options) {
  auto router = std::make_unique<ClusterRouter>(target, options);
  absl::Status status = router->Start();
  if (!status.ok()) return status;
  return router;
}

}  // namespace tollgate::redis
