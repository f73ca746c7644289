// Copyright tollgate authors. RedisConnections' implementation: what tollgate's own stores
// reach through them (where their commands go).
#ifndef TOLLGATE_SRC_STORE_REDIS_REDIS_CONNECTIONS_IMPL_H_
#define TOLLGATE_SRC_STORE_REDIS_REDIS_CONNECTIONS_IMPL_H_

#include <memory>

#include "src/store/redis/durable_writes.h"
#include "src/store/redis/router.h"
#include "tollgate/redis_connections.h"

namespace tollgate::redis {

class RedisConnectionsImpl final : public RedisConnections {
 public:
  RedisConnectionsImpl(std::unique_ptr<Router> router,
                       std::shared_ptr<DurableWaitMonitor> durable_monitor);
  ~RedisConnectionsImpl() override;

  int ReadyConnections() const override;

  Router& router() const { return *router_; }
  // The counts of every durable write sent on these connections.
  DurableWaitMonitor& durable_monitor() const { return *durable_monitor_; }

 private:
  const std::shared_ptr<DurableWaitMonitor> durable_monitor_;
  std::unique_ptr<Router> router_;
};

// Where the commands of a store on `connections` go. Every RedisConnections is a
// RedisConnectionsImpl (RedisConnections::Connect makes them).
inline Router& RouterOf(const RedisConnections& connections) {
  return static_cast<const RedisConnectionsImpl&>(connections).router();
}
inline DurableWaitMonitor& DurableMonitorOf(const RedisConnections& connections) {
  return static_cast<const RedisConnectionsImpl&>(connections).durable_monitor();
}

}  // namespace tollgate::redis

#endif  // TOLLGATE_SRC_STORE_REDIS_REDIS_CONNECTIONS_IMPL_H_
