// Copyright tollgate authors.
#include "src/server/rls_grpc.h"

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "grpc/health/v1/health.pb.h"

namespace tollgate::server {

namespace {

using HealthCheckRequest = grpc::health::v1::HealthCheckRequest;
using HealthCheckResponse = grpc::health::v1::HealthCheckResponse;

void ShouldRateLimit(RlsService& service, std::string_view bytes, GrpcResponder responder) {
  // ShouldRateLimit copies what it keeps of the request: it lives on this frame.
  RateLimitRequest request;
  if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    std::move(responder).Finish(
        absl::InvalidArgumentError("the message is not a RateLimitRequest"));
    return;
  }
  // The call's span reads the traceparent (a view into the call) before the call is answered.
  const RlsCallSource source{.api = RlsCallSource::Api::kGrpc,
                             .traceparent = responder.traceparent()};
  service.ShouldRateLimit(
      request,
      [responder = std::move(responder)](absl::StatusOr<RateLimitResponse> response) mutable {
        if (!response.ok()) {
          std::move(responder).Finish(response.status());
          return;
        }
        std::move(responder).Finish(response->SerializeAsString());
      },
      source);
}

void HealthCheck(const GrpcHealth& health, std::string_view bytes, GrpcResponder responder) {
  HealthCheckRequest request;
  if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    std::move(responder).Finish(
        absl::InvalidArgumentError("the message is not a HealthCheckRequest"));
    return;
  }
  if (!request.service().empty() && request.service() != "ratelimit") {
    std::move(responder).Finish(absl::NotFoundError("unknown service"));
    return;
  }
  HealthCheckResponse response;
  response.set_status(health.serving() ? HealthCheckResponse::SERVING
                                       : HealthCheckResponse::NOT_SERVING);
  std::move(responder).Finish(response.SerializeAsString());
}

}  // namespace

void AddRlsGrpcMethods(GrpcMethods& methods, RlsService& service, const GrpcHealth& health) {
  methods.AddUnary(kShouldRateLimitPath,
                   [&service](std::string_view request, GrpcResponder responder) {
                     ShouldRateLimit(service, request, std::move(responder));
                   });
  methods.AddUnary(kHealthCheckPath, [&health](std::string_view request, GrpcResponder responder) {
    HealthCheck(health, request, std::move(responder));
  });
}

}  // namespace tollgate::server
