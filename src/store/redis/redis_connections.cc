// Copyright tollgate authors.
#include "tollgate/redis_connections.h"

#include <chrono>
#include <memory>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/store/redis/redis_connections_impl.h"
#include "src/store/redis/redis_url.h"
#include "src/store/redis/router.h"

namespace tollgate {

absl::StatusOr<std::shared_ptr<RedisConnections>> RedisConnections::Connect(
    RedisConnectionsOptions options) {
  if (options.url.empty()) return absl::InvalidArgumentError("no Redis URL");
  absl::StatusOr<redis::RedisTarget> target = redis::ParseRedisTarget(options.url);
  if (!target.ok()) return target.status();
  if (options.connections < 1 || options.connections > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("Redis connections must be in 1..64, got ", options.connections));
  }
  if (options.connect_timeout_ms < 1 || options.reply_timeout_ms < 1 ||
      options.reconnect_min_ms < 1 || options.reconnect_max_ms < options.reconnect_min_ms) {
    return absl::InvalidArgumentError(
        "Redis options: timeouts must be >= 1 ms and reconnect_max_ms >= reconnect_min_ms");
  }
  if (options.refresh_interval_ms < 1) {
    return absl::InvalidArgumentError("Redis refresh_interval_ms must be >= 1");
  }
  redis::RouterOptions router_options;
  redis::ClientOptions& client = router_options.client;
  client.connections = options.connections;
  client.connection.connect_timeout = std::chrono::milliseconds(options.connect_timeout_ms);
  client.connection.reply_timeout = std::chrono::milliseconds(options.reply_timeout_ms);
  client.connection.reconnect_min = std::chrono::milliseconds(options.reconnect_min_ms);
  client.connection.reconnect_max = std::chrono::milliseconds(options.reconnect_max_ms);
  router_options.refresh_interval = std::chrono::milliseconds(options.refresh_interval_ms);
  router_options.caller_loops = std::move(options.caller_loops);
  auto durable_monitor = std::make_shared<redis::DurableWaitMonitor>();
  client.durable_monitor = durable_monitor;
  absl::StatusOr<std::unique_ptr<redis::Router>> router =
      redis::Router::Connect(*target, router_options);
  if (!router.ok()) return router.status();
  return std::make_shared<redis::RedisConnectionsImpl>(*std::move(router),
                                                       std::move(durable_monitor));
}

namespace redis {

RedisConnectionsImpl::RedisConnectionsImpl(std::unique_ptr<Router> router,
                                           std::shared_ptr<DurableWaitMonitor> durable_monitor)
    : durable_monitor_(std::move(durable_monitor)), router_(std::move(router)) {}

RedisConnectionsImpl::~RedisConnectionsImpl() {
  // Released on one of its own I/O threads (by a store's last callback), the router cannot
  // stop there (it joins that thread, and waits for its loops): a thread of its own does it.
  if (router_->OnIoThread()) std::thread([router = std::move(router_)] {}).detach();
}

int RedisConnectionsImpl::ReadyConnections() const { return router_->ReadyConnections(); }

}  // namespace redis
}  // namespace tollgate
