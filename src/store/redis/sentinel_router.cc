// Copyright tollgate authors. Following the primary that Redis Sentinel names.
//
// One connection to each sentinel and a ConnectionPool to the current primary, all on the
// router's I/O thread. The sentinels are asked `SENTINEL get-master-addr-by-name <name>`
// (in order, first answer wins) at start, every `refresh_interval`, and soon after a
// connection to the primary fails or the primary answers READONLY (it was demoted). When
// the answer changes, commands go to a new pool at once; the old one is shut down and
// kept until the router goes (connections must outlive their handlers).
#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "src/store/redis/refresh_scheduler.h"
#include "src/store/redis/router.h"

namespace tollgate::redis {
namespace {

namespace asio = boost::asio;

class SentinelRouter final : public Router {
 public:
  SentinelRouter(const RedisTarget& target, const RouterOptions& options)
      : target_(target),
        options_(options),
        refresher_(io_thread_.io(), options, [this] { Refresh(); }) {}

  ~SentinelRouter() override {
    io_thread_.Stop([this] {
      stopping_ = true;
      refresher_.Stop();
      for (auto& sentinel : sentinels_) sentinel->Shutdown();
      absl::MutexLock lock(&mu_);
      if (primary_pool_ != nullptr) primary_pool_->Shutdown();
    });
  }

  absl::Status Start() {
    for (const HostPort& sentinel : target_.seeds) {
      ClientOptions client = options_.client;
      client.connections = 1;
      // Sentinels are asked without AUTH, over TLS when the data nodes are (rediss-sentinel://).
      client.connection.url = RedisUrl();
      client.connection.url.host = sentinel.host;
      client.connection.url.port = sentinel.port;
      client.connection.url.tls = target_.node.tls;
      client.connection.url.tls_options = target_.node.tls_options;
      sentinels_.push_back(std::make_unique<ConnectionPool>(io_thread_.io(), client));
      sentinels_.back()->Start();
    }
    absl::Status first_error;
    bool any_ready = false;
    for (auto& sentinel : sentinels_) {
      absl::Status status = sentinel->AwaitStarted();
      any_ready = any_ready || status.ok();
      if (!status.ok() && first_error.ok()) first_error = status;
    }
    if (!any_ready) {
      return absl::UnavailableError(absl::StrCat("no sentinel answered: ", first_error.message()));
    }
    std::promise<absl::Status> resolved;
    asio::post(io_thread_.io(), [this, &resolved] {
      refresher_.RefreshNow(
          [&resolved](const absl::Status& status) { resolved.set_value(status); });
    });
    absl::Status status = resolved.get_future().get();
    if (!status.ok()) return status;
    ConnectionPool* primary = primary_.load();
    status = primary->AwaitStarted();
    if (!status.ok()) return status;
    asio::post(io_thread_.io(), [this] { refresher_.ArmPeriodic(); });
    return absl::OkStatus();
  }

  void Send(int /*slot*/, std::string formatted_command, ReplyCallback done,
            bool /*follow_ask*/) override {
    ConnectionPool* pool = primary_.load(std::memory_order_acquire);
    pool->Send(formatted_command, FollowingDemotion(pool, std::move(done)));
  }

  void SendDurable(int /*slot*/, std::string formatted_command, const DurableSend& how,
                   ReplyCallback done) override {
    ConnectionPool* pool = primary_.load(std::memory_order_acquire);
    pool->SendDurable(formatted_command, how, FollowingDemotion(pool, std::move(done)));
  }

  void Post(absl::AnyInvocable<void() &&> task) override { io_thread_.Post(std::move(task)); }
  bool OnIoThread() const override { return io_thread_.InThisThread(); }

  int ReadyConnections() const override {
    return primary_.load(std::memory_order_acquire)->ReadyConnections();
  }
  Topology topology() const override { return Topology::kSentinel; }
  std::vector<std::string> Primaries() const override {
    return {primary_.load(std::memory_order_acquire)->address()};
  }

 private:
  // `done`, after asking the sentinels again when `pool`'s reply says the primary may have
  // changed (a failure, or READONLY, which becomes Unavailable).
  ReplyCallback FollowingDemotion(ConnectionPool* pool, ReplyCallback done) {
    return [this, pool, done = std::move(done)](absl::StatusOr<RedisReply> reply) mutable {
      if (!reply.ok()) {
        refresher_.Request();
      } else if (reply->is_error() && absl::StartsWith(reply->str, "READONLY")) {
        refresher_.Request();
        reply = absl::UnavailableError(
            absl::StrCat("Redis at ", pool->address(), " is no longer the primary: ", reply->str));
      }
      std::move(done)(std::move(reply));
    };
  }

  // One refresh, started by refresher_; ends with refresher_.Finish().
  void Refresh() { Ask(0); }

  // Asks sentinel `index`, then the next one if it does not know the primary.
  void Ask(size_t index) {
    if (stopping_) {
      refresher_.Finish(absl::UnavailableError("the Redis store is shutting down"));
      return;
    }
    if (index >= sentinels_.size()) {
      refresher_.Finish(absl::UnavailableError(
          absl::StrCat("no sentinel named a primary for \"", target_.master_name,
                       "\" (SENTINEL get-master-addr-by-name)")));
      return;
    }
    sentinels_[index]->Send(
        FormatCommand({"SENTINEL", "get-master-addr-by-name", target_.master_name}),
        [this, index](absl::StatusOr<RedisReply> reply) {
          HostPort primary;
          if (reply.ok() && reply->type == RedisReply::Type::kArray &&
              reply->elements.size() == 2 && !reply->elements[0].str.empty() &&
              absl::SimpleAtoi(reply->elements[1].str, &primary.port)) {
            primary.host = reply->elements[0].str;
            UsePrimary(primary);
            refresher_.Finish(absl::OkStatus());
            return;
          }
          Ask(index + 1);
        });
  }

  // On the I/O thread (or in Start, before any other use).
  void UsePrimary(const HostPort& primary) {
    const std::string address = absl::StrCat(primary.host, ":", primary.port);
    ConnectionPool* current = primary_.load();
    if (current != nullptr && current->address() == address) return;
    ClientOptions client = options_.client;
    client.connection.url = target_.node;
    client.connection.url.host = primary.host;
    client.connection.url.port = primary.port;
    auto pool = std::make_unique<ConnectionPool>(io_thread_.io(), client);
    pool->Start();
    primary_.store(pool.get(), std::memory_order_release);
    absl::MutexLock lock(&mu_);
    if (primary_pool_ != nullptr) {
      primary_pool_->Shutdown();
      retired_.push_back(std::move(primary_pool_));
    }
    primary_pool_ = std::move(pool);
  }

  // First, so that it is destroyed last.
  IoThread io_thread_;
  const RedisTarget target_;
  const RouterOptions options_;
  std::vector<std::unique_ptr<ConnectionPool>> sentinels_;  // fixed after Start
  std::atomic<ConnectionPool*> primary_{nullptr};

  absl::Mutex mu_;
  std::unique_ptr<ConnectionPool> primary_pool_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<ConnectionPool>> retired_ ABSL_GUARDED_BY(mu_);

  // Only touched on the I/O thread.
  bool stopping_ = false;
  RefreshScheduler refresher_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Router>> ConnectSentinelRouter(const RedisTarget& target,
                                                              const RouterOptions& options) {
  auto router = std::make_unique<SentinelRouter>(target, options);
  absl::Status status = router->Start();
  if (!status.ok()) return status;
  return router;
}

}  // namespace tollgate::redis
