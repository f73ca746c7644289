// Copyright tollgate authors. Envoy's rate-limit service and gRPC's health service as unary
// methods of a GrpcServer (src/server/grpc_server.h).
//
// - /envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit: the message is parsed by
//   protobuf as a RateLimitRequest and answered by RlsService::ShouldRateLimit. A message
//   protobuf's parser refuses: INVALID_ARGUMENT; RlsService's errors keep their code.
// - /grpc.health.v1.Health/Check: the service names "" and "ratelimit" answer SERVING, or
//   NOT_SERVING once the server is shutting down (GrpcHealth::SetServing(false)); any other
//   name NOT_FOUND (as grpc.health.v1 says). Health/Watch (a server stream) is not served:
//   UNIMPLEMENTED, which grpc-health-probe, Kubernetes and Envoy do not call.
#ifndef TOLLGATE_SRC_SERVER_RLS_GRPC_H_
#define TOLLGATE_SRC_SERVER_RLS_GRPC_H_

#include <atomic>

#include "src/server/grpc_server.h"
#include "src/server/rls_service.h"

namespace tollgate::server {

inline constexpr char kShouldRateLimitPath[] =
    "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
inline constexpr char kHealthCheckPath[] = "/grpc.health.v1.Health/Check";

// What Health/Check answers. Thread-safe.
class GrpcHealth {
 public:
  void SetServing(bool serving) { serving_.store(serving, std::memory_order_release); }
  bool serving() const { return serving_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> serving_{true};
};

// Adds ShouldRateLimit and Health/Check to `methods`. REQUIRES: `service` and `health`
// outlive the server the methods are given to.
void AddRlsGrpcMethods(GrpcMethods& methods, RlsService& service, const GrpcHealth& health);

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_RLS_GRPC_H_
