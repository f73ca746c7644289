// Copyright tollgate authors. What ShouldRateLimit reads of Envoy's RateLimitRequest, as views.
//
// ReadRateLimitRequest reads it straight from the gRPC message's bytes (Protocol Buffers'
// wire format) without building the message: the domain, each descriptor's entries, its
// `limit` override and its `hits_addend`, and the request's `hits_addend`, as views into the
// bytes. It accepts exactly the bytes protobuf's parser of the message accepts, and reads the
// same values from them (rls_request_test.cc compares the two on generated and mutated
// messages):
// - fields it does not read (unknown numbers, or a known number with another wire type) are
//   skipped, groups included; a field given twice keeps its last value, and a message field
//   given twice merges;
// - strings must be valid UTF-8 (proto3), lengths must fit, varints are at most 10 bytes
//   (tags and lengths 5), nesting is at most 100 deep; tag 0 or an unmatched end-group tag
//   is malformed.
// RateLimitRequestView::Of views a parsed message (POST /json, tests) the same way.
//
// Measured beside protobuf's parser by bench/hot_path_bench (BM_ReadRlsRequest*); figures in
// BENCHMARKS.md, "Home-made parts against the libraries".
#ifndef TOLLGATE_SRC_SERVER_RLS_REQUEST_H_
#define TOLLGATE_SRC_SERVER_RLS_REQUEST_H_

#include <cstdint>
#include <string_view>

#include "absl/container/inlined_vector.h"
#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "src/server/descriptor_matcher.h"

namespace tollgate::server {

// One RateLimitDescriptor: its entries in order, and its optional override and hits.
struct RlsDescriptorView {
  absl::InlinedVector<DescriptorEntry, 4> entries;
  bool has_limit = false;  // `limit` was given (even empty)
  uint32_t requests_per_unit = 0;
  int32_t unit = 0;              // envoy.type.v3.RateLimitUnit's number, as sent
  bool has_hits_addend = false;  // `hits_addend` was given (even empty: 0)
  uint64_t hits_addend = 0;

  friend bool operator==(const RlsDescriptorView& a, const RlsDescriptorView& b);
};

struct RateLimitRequestView {
  std::string_view domain;
  absl::InlinedVector<RlsDescriptorView, 2> descriptors;
  uint32_t hits_addend = 0;

  // Views into `request`, which must outlive the view.
  static RateLimitRequestView Of(const envoy::service::ratelimit::v3::RateLimitRequest& request);

  friend bool operator==(const RateLimitRequestView& a, const RateLimitRequestView& b);
};

// Reads `bytes` as a RateLimitRequest into `*out` (views into `bytes`); false when protobuf's
// parser would refuse them (`*out` then holds what was read so far).
bool ReadRateLimitRequest(std::string_view bytes, RateLimitRequestView* out);

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_RLS_REQUEST_H_
