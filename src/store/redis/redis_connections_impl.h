// Copyright tollgate authors. RedisConnections' implementation: what tollgate's own stores
// reach through them (where their commands go).
#ifndef TOLLGATE_SRC_STORE_REDIS_REDIS_CONNECTIONS_IMPL_H_
#define TOLLGATE_SRC_STORE_REDIS_REDIS_CONNECTIONS_IMPL_H_

#include <memory>

#include "src/store/redis/router.h"
#include "tollgate/redis_connections.h"

namespace tollgate::redis {

class RedisConnectionsImpl final : public RedisConnections {
 public:
  explicit RedisConnectionsImpl(std::unique_ptr<Router> router);
  ~RedisConnectionsImpl() override;

  int ReadyConnections() const override;

  Router& router() const { return *router_; }

 private:
  std::unique_ptr<Router> router_;
};

// Where the commands of a store on `connections` go. Every RedisConnections is a
// RedisConnectionsImpl (RedisConnections::Connect makes them).
inline Router& RouterOf(const RedisConnections& connections) {
  return static_cast<const RedisConnectionsImpl&>(connections).router();
}

}  // namespace tollgate::redis

#endif  // TOLLGATE_SRC_STORE_REDIS_REDIS_CONNECTIONS_IMPL_H_
