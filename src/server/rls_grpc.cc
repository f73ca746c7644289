// Copyright tollgate authors.
#include "src/server/rls_grpc.h"

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "google/protobuf/arena.h"
#include "grpc/health/v1/health.pb.h"

namespace tollgate::server {

namespace {

using HealthCheckRequest = grpc::health::v1::HealthCheckRequest;
using HealthCheckResponse = grpc::health::v1::HealthCheckResponse;

// One ShouldRateLimit request, parsed on an arena whose first block is part of this object:
// parsing an Envoy request takes one allocation.
struct RlsRequest {
  static google::protobuf::ArenaOptions Options(char* block, size_t size) {
    google::protobuf::ArenaOptions options;
    options.initial_block = block;
    options.initial_block_size = size;
    return options;
  }

  RlsRequest()
      : arena(Options(block, sizeof(block))),
        message(google::protobuf::Arena::CreateMessage<RateLimitRequest>(&arena)) {}

  // A request of a few descriptors fits; a larger one gets further blocks from the heap.
  alignas(std::max_align_t) char block[1024];
  google::protobuf::Arena arena;
  RateLimitRequest* message;
};

void ShouldRateLimit(RlsService& service, std::string_view bytes, GrpcResponder responder) {
  // The request is only read until ShouldRateLimitBytes returns (the plan copies what it
  // keeps), so it lives on this frame.
  RlsRequest request;
  if (!request.message->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    std::move(responder).Finish(
        absl::InvalidArgumentError("the message is not a RateLimitRequest"));
    return;
  }
  service.ShouldRateLimitBytes(*request.message, [responder = std::move(responder)](
                                                     absl::StatusOr<std::string> response) mutable {
    if (!response.ok()) {
      std::move(responder).Finish(response.status());
      return;
    }
    std::move(responder).Finish(*std::move(response));
  });
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
