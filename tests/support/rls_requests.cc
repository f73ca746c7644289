// Copyright tollgate authors.
#include "tests/support/rls_requests.h"

namespace tollgate::testing {

envoy::service::ratelimit::v3::RateLimitRequest MakeRateLimitRequest(
    std::string domain, const std::vector<DescriptorEntries>& descriptors, uint32_t hits) {
  envoy::service::ratelimit::v3::RateLimitRequest request;
  request.set_domain(std::move(domain));
  request.set_hits_addend(hits);
  for (const DescriptorEntries& entries : descriptors) {
    auto* descriptor = request.add_descriptors();
    for (const auto& [key, value] : entries) {
      auto* entry = descriptor->add_entries();
      entry->set_key(key);
      entry->set_value(value);
    }
  }
  return request;
}

}  // namespace tollgate::testing
