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

// One ShouldRateLimit call: request and response on an arena whose first block is part of
// this object, so parsing an Envoy request and building its answer take one allocation.
struct RlsCall {
  static google::protobuf::ArenaOptions Options(char* block, size_t size) {
    google::protobuf::ArenaOptions options;
    options.initial_block = block;
    options.initial_block_size = size;
    return options;
  }

  explicit RlsCall(GrpcResponder responder_in)
      : arena(Options(block, sizeof(block))),
        request(google::protobuf::Arena::CreateMessage<RateLimitRequest>(&arena)),
        response(google::protobuf::Arena::CreateMessage<RateLimitResponse>(&arena)),
        responder(std::move(responder_in)) {}

  // A one-descriptor request and its answer (with the RateLimit-* headers) need about 1 KiB;
  // a larger call gets further blocks from the heap.
  alignas(std::max_align_t) char block[2048];
  google::protobuf::Arena arena;
  RateLimitRequest* request;
  RateLimitResponse* response;
  GrpcResponder responder;
};

void ShouldRateLimit(RlsService& service, std::string_view bytes, GrpcResponder responder) {
  auto call = std::make_unique<RlsCall>(std::move(responder));
  if (!call->request->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    std::move(call->responder)
        .Finish(absl::InvalidArgumentError("the message is not a RateLimitRequest"));
    return;
  }
  RlsCall* raw = call.get();
  // `call` lives until `done` has run (the request and response it holds with it).
  service.ShouldRateLimit(*raw->request, raw->response,
                          [call = std::move(call)](absl::Status status) mutable {
                            if (!status.ok()) {
                              std::move(call->responder).Finish(status);
                              return;
                            }
                            std::string out;
                            call->response->SerializeToString(&out);
                            std::move(call->responder).Finish(std::move(out));
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
