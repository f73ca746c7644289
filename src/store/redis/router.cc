// Copyright tollgate authors.
#include "src/store/redis/router.h"

#include <atomic>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "boost/asio/execution_context.hpp"
#include "boost/asio/post.hpp"

namespace tollgate::redis {
namespace {

// Keeps the connection pools of a router that is gone until their io_context is destroyed:
// their cancelled operations' handlers, still queued on the loop, point at them.
class RetiredPools final : public boost::asio::execution_context::service {
 public:
  using key_type = RetiredPools;
  static inline boost::asio::execution_context::id id;
  explicit RetiredPools(boost::asio::execution_context& context)
      : boost::asio::execution_context::service(context) {}
  void Keep(std::unique_ptr<ConnectionPool> pool) {
    absl::MutexLock lock(&mu_);
    pools_.push_back(std::move(pool));
  }

 private:
  void shutdown() override {}
  absl::Mutex mu_;
  std::vector<std::unique_ptr<ConnectionPool>> pools_ ABSL_GUARDED_BY(mu_);
};

// A pool whose connections run on one of the caller's loops.
struct LoopPool {
  boost::asio::io_context* io = nullptr;
  std::unique_ptr<ConnectionPool> pool;
};

// The one Redis of a redis:// URL: a RedisClient, slots ignored, no redirects; with caller
// loops, a pool on each, used by commands sent on that loop's thread.
class StandaloneRouter final : public Router {
 public:
  StandaloneRouter(std::unique_ptr<RedisClient> client, std::vector<LoopPool> loop_pools,
                   std::string address)
      : address_(std::move(address)),
        client_(std::move(client)),
        loop_pools_(std::move(loop_pools)) {}

  ~StandaloneRouter() override {
    for (LoopPool& loop_pool : loop_pools_) {
      // Fails what is pending on the loop's thread, then hands the pool to the loop, which
      // frees it with its io_context.
      auto done = std::make_shared<absl::Notification>();
      ConnectionPool* pool = loop_pool.pool.get();
      boost::asio::use_service<RetiredPools>(*loop_pool.io).Keep(std::move(loop_pool.pool));
      boost::asio::post(*loop_pool.io, [pool, done] {
        pool->Shutdown();
        done->Notify();
      });
      done->WaitForNotificationWithTimeout(absl::Seconds(5));
    }
  }

  void Send(int /*slot*/, std::string formatted_command, ReplyCallback done,
            bool /*follow_ask*/) override {
    for (const LoopPool& loop_pool : loop_pools_) {
      if (loop_pool.io->get_executor().running_in_this_thread()) {
        loop_pool.pool->Send(formatted_command, std::move(done));
        return;
      }
    }
    client_->Send(formatted_command, std::move(done));
  }

  void SendDurable(int /*slot*/, std::string formatted_command, const DurableSend& how,
                   ReplyCallback done) override {
    for (const LoopPool& loop_pool : loop_pools_) {
      if (loop_pool.io->get_executor().running_in_this_thread()) {
        loop_pool.pool->SendDurable(formatted_command, how, std::move(done));
        return;
      }
    }
    client_->SendDurable(formatted_command, how, std::move(done));
  }

  bool OnIoThread() const override {
    for (const LoopPool& loop_pool : loop_pools_) {
      if (loop_pool.io->get_executor().running_in_this_thread()) return true;
    }
    return client_->OnIoThread();
  }

  void Post(absl::AnyInvocable<void() &&> task) override {
    if (loop_pools_.empty()) {
      client_->Post(std::move(task));
      return;
    }
    const size_t loop = next_loop_.fetch_add(1, std::memory_order_relaxed) % loop_pools_.size();
    boost::asio::post(*loop_pools_[loop].io,
                      [task = std::move(task)]() mutable { std::move(task)(); });
  }
  // Waits for every loop pool's first connection attempts. OK, or the first error.
  absl::Status AwaitLoopPools() {
    for (const LoopPool& loop_pool : loop_pools_) {
      if (absl::Status status = loop_pool.pool->AwaitStarted(); !status.ok()) return status;
    }
    return absl::OkStatus();
  }

  int ReadyConnections() const override { return client_->ReadyConnections(); }
  Topology topology() const override { return Topology::kStandalone; }
  std::vector<std::string> Primaries() const override { return {address_}; }

 private:
  const std::string address_;
  std::unique_ptr<RedisClient> client_;
  std::vector<LoopPool> loop_pools_;
  std::atomic<size_t> next_loop_{0};
};

}  // namespace

absl::StatusOr<std::unique_ptr<Router>> Router::Connect(const RedisTarget& target,
                                                        const RouterOptions& options) {
  switch (target.topology) {
    case Topology::kCluster:
      return ConnectClusterRouter(target, options);
    case Topology::kSentinel:
      return ConnectSentinelRouter(target, options);
    case Topology::kStandalone:
      break;
  }
  ClientOptions client_options = options.client;
  client_options.connection.url = target.node;
  absl::StatusOr<std::unique_ptr<RedisClient>> client = RedisClient::Connect(client_options);
  if (!client.ok()) return client.status();
  // One connection per loop: a loop is one thread, and the commands it sends in one turn
  // leave in one write on one connection (more connections would only split that write).
  ClientOptions loop_options = client_options;
  loop_options.connections = 1;
  std::vector<LoopPool> loop_pools;
  for (boost::asio::io_context* io : options.caller_loops) {
    LoopPool& loop_pool = loop_pools.emplace_back();
    loop_pool.io = io;
    loop_pool.pool = std::make_unique<ConnectionPool>(*io, loop_options);
    loop_pool.pool->Start();  // each connection's attempt runs on its loop
  }
  // The router owns the pools from here, so a failure below still shuts them down.
  auto router =
      std::make_unique<StandaloneRouter>(*std::move(client), std::move(loop_pools),
                                         absl::StrCat(target.node.host, ":", target.node.port));
  if (absl::Status started = router->AwaitLoopPools(); !started.ok()) return started;
  return router;
}

absl::StatusOr<RedisReply> Router::Command(const std::vector<std::string>& args, int slot) {
  return BlockingCommand(args, [this, slot](std::string command, ReplyCallback done) {
    Send(slot, std::move(command), std::move(done));
  });
}

}  // namespace tollgate::redis
