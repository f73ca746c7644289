// Copyright tollgate authors. Fuzz target: a request body of POST /v1/check and of POST /json.
// The /v1/check parser returns a request or an InvalidArgument (never throws); /json is
// answered end to end by an RlsService on an in-memory store, and its reply is JSON with an
// HTTP status the API documents (200, 400 or 429).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "nlohmann/json.hpp"
#include "src/config/envoy_config.h"
#include "src/server/check_json.h"
#include "src/server/rls_service.h"
#include "tollgate/clock.h"

namespace {

constexpr char kEnvoyConfig[] = R"(domain: shop
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: ip
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: token_bucket}
  - key: path
    value: "/api*"
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 3, algorithm: sliding_window, name: api}
      - key: plan
        value: free
        rate_limit: {unit: day, requests_per_unit: 0}
  - key: vip
    rate_limit: {unlimited: true, replaces: [{name: api}]}
)";

tollgate::server::RlsService& Service() {
  static tollgate::SimulatedClock* clock = new tollgate::SimulatedClock();
  static tollgate::server::RlsService* service = [] {
    absl::StatusOr<tollgate::EnvoyDomainConfig> config =
        tollgate::ParseEnvoyConfig(kEnvoyConfig, "shop.yaml");
    if (!config.ok()) std::abort();
    tollgate::server::RlsServiceOptions options;
    options.domains.push_back(*std::move(config));
    options.clock = clock;
    options.max_override_limits = 16;
    auto created = tollgate::server::RlsService::Create(std::move(options));
    if (!created.ok()) std::abort();
    return created->release();
  }();
  clock->AdvanceMicros(250'000);  // refills between inputs, so OK and OVER_LIMIT both occur
  return *service;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);

  absl::StatusOr<tollgate::server::ParsedCheckBody> parsed =
      tollgate::server::ParseCheckBody(body, 4);
  if (parsed.ok()) {
    if (parsed->requests.empty() || parsed->requests.size() > 4) std::abort();
    for (const tollgate::server::ParsedCheck& request : parsed->requests) {
      if (request.limit.empty() || request.key.empty() || request.cost < 0) std::abort();
    }
  } else if (parsed.status().code() != absl::StatusCode::kInvalidArgument) {
    std::abort();
  } else {
    // The error body must serialize whatever bytes the message quotes.
    (void)tollgate::server::ErrorBody(parsed.status().message());
  }

  bool answered = false;
  tollgate::server::HandleRlsJson(
      Service(), body, /*x_ratelimit_headers=*/true,
      [&](const tollgate::server::RlsJsonReply& reply) {
        answered = true;
        if (reply.http_status != 200 && reply.http_status != 400 && reply.http_status != 429) {
          std::abort();
        }
        if (!nlohmann::json::accept(reply.body)) std::abort();
      });
  // The in-memory store answers inline.
  if (!answered) std::abort();
  return 0;
}
