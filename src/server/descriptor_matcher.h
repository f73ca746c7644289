// Copyright tollgate authors. Finds the Envoy-style rule for a request's descriptor.
//
// The rules are those of envoyproxy/ratelimit. A descriptor's entries are walked one by one
// down the configured tree; at each level the most specific descriptor wins: the exact
// (key, value), else the first wildcard that matches the value (in file order; each '*'
// matches any run of characters, WildcardMatches), else the key with no value (which matches any
// value). A rule applies only when it sits at the depth of the descriptor's last entry; a
// descriptor that leaves the tree early, or matches nothing, has no rule and is not limited.
#ifndef TOLLGATE_SRC_SERVER_DESCRIPTOR_MATCHER_H_
#define TOLLGATE_SRC_SERVER_DESCRIPTOR_MATCHER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "src/config/envoy_config.h"
#include "tollgate/limit.h"

namespace tollgate {

// One configured rule, compiled.
struct EnvoyRule {
  std::string domain;
  // envoyproxy/ratelimit's full key of the rule, e.g. "tiffin.tenant.path_/api/*".
  std::string full_key;
  EnvoyRateLimit rate_limit;
  bool shadow_mode = false;
  // envoyproxy/ratelimit's quota mode (EnvoyDescriptor::quota_mode).
  bool quota_mode = false;
  // The `metadata` of the descriptor holding the rule, as a JSON object; empty when none
  // (EnvoyDescriptor::metadata_json).
  std::string metadata_json;
  // The tollgate::Limit that counts this rule (full_key, made unique if needed). Empty when
  // nothing is counted: unlimited, or requests_per_unit 0 (always over the limit).
  std::string limit_name;
};

// One entry of a request's descriptor. The views must outlive the Match call only.
struct DescriptorEntry {
  std::string_view key;
  std::string_view value;
};

// The numbers a rule counts with: a window of unit_multiplier units holding
// requests_per_unit, or a token bucket of requests_per_unit refilled at requests_per_unit per
// unit_multiplier units. REQUIRES: requests_per_unit >= 1, unit_multiplier >= 1.
LimitNumbers EnvoyLimitNumbers(Algorithm algorithm, uint32_t requests_per_unit, EnvoyUnit unit,
                               uint32_t unit_multiplier = 1);

// Immutable once created; Match is thread-safe.
class DescriptorMatcher {
 public:
  // InvalidArgument when two configs share a domain (naming both files).
  static absl::StatusOr<std::unique_ptr<DescriptorMatcher>> Create(
      std::vector<EnvoyDomainConfig> domains);

  DescriptorMatcher(const DescriptorMatcher&) = delete;
  DescriptorMatcher& operator=(const DescriptorMatcher&) = delete;
  ~DescriptorMatcher();

  bool HasDomain(std::string_view domain) const;

  // The rule for `entries` in `domain`, or nullptr when none applies. The pointer lives as
  // long as the matcher.
  const EnvoyRule* Match(std::string_view domain, absl::Span<const DescriptorEntry> entries) const;

  // As above; when a rule is found, `*counted_values` (cleared first) holds one value per
  // entry to count the request by: the entry's own value, or, for an entry matched by a
  // share_threshold wildcard, the wildcard itself (so all its values share one counter).
  // The views live as long as the entries' values and the matcher.
  const EnvoyRule* Match(std::string_view domain, absl::Span<const DescriptorEntry> entries,
                         std::vector<std::string_view>* counted_values) const;

  // One limit per counting rule (non-empty limit_name), with a unique name.
  const std::vector<Limit>& limits() const { return limits_; }

 private:
  struct Node;
  struct Level;
  DescriptorMatcher();
  void AddLevel(const std::string& domain, const std::string& parent_key,
                std::vector<EnvoyDescriptor>& descriptors, Level& level);

  absl::flat_hash_map<std::string, std::unique_ptr<Level>> domains_;
  std::deque<EnvoyRule> rules_;  // stable addresses
  std::vector<Limit> limits_;
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_SERVER_DESCRIPTOR_MATCHER_H_
