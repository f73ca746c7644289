// Copyright tollgate authors. Envoy's ShouldRateLimit as pure steps: plan, then render.
//
// PlanRateLimit turns a RateLimitRequest into what to check: per descriptor, whether it is
// counted (and against which Limit, with which store key and cost), unlimited, replaced by
// another rule, blocked (requests_per_unit 0) or not limited at all, and whether a refusal of it
// refuses the request (enforced) or is only reported (shadow). The caller checks the counted
// descriptors in ONE store call (Limiter::CheckAllAsync, or Limiter::CheckAsync for one), stores
// each decision in the plan, and RenderRateLimitResponse (src/server/rls_render.h) writes the
// answer. Nothing here touches gRPC, sockets or a store; tests drive it directly
// (rls_plan_test.cc).
//
// The rules (as envoyproxy/ratelimit, except where docs/envoy.md says otherwise):
// - An unknown domain: OK with no statuses.
// - A per-descriptor `limit` override replaces the configured numbers, whether or not a rule
//   matches; it is never in shadow mode and takes no part in `replaces`. Its limit comes
//   from OverrideLimits (no Limiter is rebuilt); its key carries the domain.
// - No rule: OK, not counted. `unlimited`: OK, not counted, limit_remaining = 2^32-1. A rule
//   named in another matched rule's `replaces`: OK, not counted. requests_per_unit 0:
//   OVER_LIMIT (unless the rule is in shadow mode).
// - Hits: the descriptor's hits_addend when set (0 checks without counting), else the
//   request's hits_addend, where 0 means 1.
// - Reports: a descriptor whose own hits_addend is above 0 reports consumption that happened
//   (Envoy's apply_on_stream_done, a response's tokens): it is charged in full
//   (ItemOp::kCharge), whatever the request does, and answers OVER_LIMIT when that leaves its
//   limit in debt, as envoyproxy/ratelimit counts every hit. The request's hits_addend and
//   the unset descriptor one are requests: all or nothing, a refusal counts nothing. With
//   RlsPlanOptions::descriptor_hits_are_reports false, every hits_addend is a request.
// - All or nothing over the enforced descriptors: if one is refused (or blocked), nothing is
//   counted. Shadow descriptors never refuse; when the request passes, each is counted if it
//   passes on its own (CheckItem::shadow: decided in the same store call).
// - Statuses: an OVER_LIMIT descriptor reports limit_remaining 0; the others what they have
//   left (after their hits if counted, before if the request was refused and they were
//   not). duration_until_reset is whole seconds, rounded up.
// - Quota mode (a rule's quota_mode): its descriptor reports OVER_LIMIT when refused, but
//   the request is refused for quota descriptors only when every one of them is refused.
//   They are checked like shadow items (never deciding the store call), so when all of
//   them are refused the rate-limit descriptors that passed have been counted.
// - share_threshold: a descriptor matched by such a wildcard is counted under the wildcard
//   (one counter for all the values it matches) instead of under its own value.
// - unit_multiplier: the window is that many units; current_limit still names the unit.
// - Global quota mode (envoyproxy/ratelimit's QUOTA_MODE): every descriptor but an
//   `unlimited` one is a quota descriptor, those without a rule too (they pass), so the
//   request is refused only when every such descriptor is over its limit.
// - Global shadow mode: every descriptor is shadow, and the overall code is OK while each
//   descriptor's code stays as computed.
// - A fail_closed limit refused because the store is unreachable: OVER_LIMIT with
//   duration_until_reset the outage's retry time (not the window's), and the response's
//   dynamic_metadata says why: {"reason": "store_unavailable", "limit": <its name>}.
// - Response dynamic metadata (envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA, when
//   asked for): {"domain": ..., "descriptors": [{"entries": ["k=v", ...], "limit": <the
//   override in protobuf text form, when set>, "hitsAddend": <when set>}, ...],
//   "hitsAddend": <the request's, when not 0>, "metadata": <the rules' `metadata` merged>}
//   with "reason" and "limit" added as above when the store is unreachable. "metadata" merges
//   the `metadata` of the matched rules whose descriptor answered OK (not `unlimited`), in
//   request order: maps merge key by key, and for any other value the first one stays;
//   absent when none has any.
#ifndef TOLLGATE_SRC_SERVER_RLS_PLAN_H_
#define TOLLGATE_SRC_SERVER_RLS_PLAN_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "google/protobuf/struct.pb.h"
#include "src/server/descriptor_matcher.h"
#include "tollgate/decision.h"
#include "tollgate/limit.h"
#include "tollgate/limiter.h"
#include "tollgate/store.h"

namespace tollgate::server {

class Metrics;

using RateLimitRequest = envoy::service::ratelimit::v3::RateLimitRequest;
using RateLimitResponse = envoy::service::ratelimit::v3::RateLimitResponse;

// The limits made for Envoy's per-descriptor `limit` overrides: one fixed-window Limit per
// distinct (requests_per_unit, unit), shared by all domains (the key carries the domain),
// created on first use and kept for the life of the table, at stable addresses, so that a
// check in flight may point at one. Bounded: beyond `max_limits` distinct shapes, Find
// answers nullptr and the caller applies the configured rule instead.
// Thread-safe (a lock per Find of an override; descriptors without one never call it).
class OverrideLimits {
 public:
  // `metrics`, when set, gets each new limit's name registered. REQUIRES: outlives this.
  explicit OverrideLimits(int max_limits, Metrics* metrics = nullptr)
      : max_limits_(max_limits), metrics_(metrics) {}
  OverrideLimits(const OverrideLimits&) = delete;
  OverrideLimits& operator=(const OverrideLimits&) = delete;

  // The limit "override:<requests_per_unit>/<unit>", or nullptr when the table is full.
  // The pointer lives as long as the table. REQUIRES: requests_per_unit >= 1.
  const Limit* Find(uint32_t requests_per_unit, EnvoyUnit unit);

  // How many distinct overrides are known.
  int size() const;

 private:
  const int max_limits_;
  Metrics* const metrics_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::pair<uint32_t, int>, const Limit*> by_shape_ ABSL_GUARDED_BY(mu_);
  std::deque<Limit> limits_ ABSL_GUARDED_BY(mu_);  // stable addresses
};

// What one descriptor of a request turned into.
enum class DescriptorPlan {
  kNoRule,     // OK, nothing counted
  kUnlimited,  // OK, nothing counted, remaining = max
  kReplaced,   // another matched rule replaces it: OK, nothing counted
  kBlocked,    // requests_per_unit 0: always over the limit
  kCounted,    // checked in the store
};

struct PlannedDescriptor {
  DescriptorPlan plan = DescriptorPlan::kNoRule;
  // The matched rule (lives as long as the matcher); nullptr for an override or no rule.
  const EnvoyRule* rule = nullptr;
  // kCounted: the limit to check (the Limiter's, or an override's), its store key and the
  // hits to count (0 when the request is blocked: only looked at).
  const Limit* limit = nullptr;
  std::string key;
  int64_t cost = 0;
  // kCounted: a report (its own hits_addend above 0): charged, not checked (see above).
  bool report = false;
  // For current_limit.
  uint32_t requests_per_unit = 0;
  EnvoyUnit unit = EnvoyUnit::kSecond;
  // The window is unit_multiplier units.
  uint32_t unit_multiplier = 1;
  // The rule is in quota mode (envoyproxy/ratelimit's quota_mode).
  bool quota = false;
  // The rule is in shadow mode (its refusal answers OK for its descriptor).
  bool rule_shadow = false;
  // A refusal refuses the request: neither the rule nor the service is in shadow mode and
  // the rule is not in quota mode.
  bool enforced = true;
  // kCounted: the store's decision, set by the caller; nullopt when the store failed
  // (the descriptor then answers OK: fail open).
  std::optional<Decision> decision;
};

struct RlsPlan {
  bool known_domain = false;
  bool global_shadow = false;
  // An enforced kBlocked descriptor refuses the request: the counted ones are only looked
  // at (cost 0), so nothing is counted but reports (consumption that happened).
  bool blocked = false;
  // One per request descriptor, in order.
  std::vector<PlannedDescriptor> descriptors;
  // Indexes of the kCounted descriptors, in order: the items of the one store call.
  std::vector<size_t> counted;
  // With RlsPlanOptions::dynamic_metadata: the request's part of the response's dynamic
  // metadata (domain, descriptors, hitsAddend), completed by RenderRateLimitResponse.
  std::optional<google::protobuf::Struct> dynamic_metadata;
};

struct RlsPlanOptions {
  // Every rule in shadow mode.
  bool global_shadow = false;
  // Every descriptor in quota mode (see above).
  bool global_quota = false;
  // Answer with the request and the matched rules' `metadata` in dynamic_metadata.
  bool dynamic_metadata = false;
  // A descriptor's own hits_addend above 0 is a report (charged in full, see above); false:
  // it is a request like the others, all or nothing (envoyproxy/ratelimit's
  // STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: nothing is spent when over the limit).
  bool descriptor_hits_are_reports = true;
  // More descriptors than this is InvalidArgument.
  int max_descriptors = 64;
};

// The plan for `request`. InvalidArgument for an empty domain or descriptor list, more than
// `max_descriptors` descriptors, an entry with an empty key, or a counted descriptor whose
// key is longer than kMaxKeyBytes. `limiter` is the one holding the matcher's limits;
// `overrides` may be nullptr (overrides are then ignored). The plan points into `matcher`,
// `limiter` and `overrides`: it must not outlive them.
absl::StatusOr<RlsPlan> PlanRateLimit(const RateLimitRequest& request,
                                      const DescriptorMatcher& matcher, const Limiter& limiter,
                                      OverrideLimits* overrides, const RlsPlanOptions& options);

// The Limiter::CheckAll items of plan.counted (keys moved out of the plan, limits by
// reference), shadow set for the ones not enforced, reports charged.
std::vector<CheckRequest> TakeCheckRequests(RlsPlan& plan);

// The store key of a descriptor's entries: "k=v,k=v" with '%', ',' and '=' percent-encoded, so
// two different entry lists never give the same key; with `values[i]` in place of entry i's
// value (entries past values.size() keep theirs).
std::string DescriptorKey(absl::Span<const DescriptorEntry> entries,
                          absl::Span<const std::string_view> values = {});

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_RLS_PLAN_H_
