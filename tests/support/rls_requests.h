// Copyright tollgate authors. Envoy RateLimitRequests for tests, from plain values.
#ifndef TOLLGATE_TESTS_SUPPORT_RLS_REQUESTS_H_
#define TOLLGATE_TESTS_SUPPORT_RLS_REQUESTS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "envoy/service/ratelimit/v3/rls.pb.h"

namespace tollgate::testing {

// (key, value) entries of one descriptor, in order.
using DescriptorEntries = std::vector<std::pair<std::string, std::string>>;

// A request of `domain` with one descriptor per element of `descriptors` and the request's
// hits_addend `hits`.
envoy::service::ratelimit::v3::RateLimitRequest MakeRateLimitRequest(
    std::string domain, const std::vector<DescriptorEntries>& descriptors, uint32_t hits = 0);

}  // namespace tollgate::testing

#endif  // TOLLGATE_TESTS_SUPPORT_RLS_REQUESTS_H_
