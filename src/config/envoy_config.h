// Copyright tollgate authors. Envoy-style rate-limit configuration (envoyproxy/ratelimit's
// format), loaded as is.
//
//   domain: tiffin
//   descriptors:
//     - key: remote_address                 # any value: one counter per distinct address
//       rate_limit: {unit: second, requests_per_unit: 10}
//     - key: remote_address
//       value: 50.0.0.5                     # a more specific rule wins
//       rate_limit: {unit: second, requests_per_unit: 0}   # 0: always over the limit
//     - key: path
//       value: "/api/*"                     # wildcard: a value prefix
//       shadow_mode: true                   # counted, never refuses
//       rate_limit:
//         unit: minute
//         requests_per_unit: 100
//         name: api_paths                   # another rule may replace this one by name
//         algorithm: token_bucket           # tollgate extension (default fixed_window)
//         durable: true                     # tollgate extension (docs/redis.md)
//       descriptors: [...]                  # nested entries of the same descriptor
//
// The files are told apart from tollgate's own `limits:` format by their top-level keys
// (DetectConfigKind).
#ifndef TOLLGATE_SRC_CONFIG_ENVOY_CONFIG_H_
#define TOLLGATE_SRC_CONFIG_ENVOY_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tollgate/limit.h"

namespace tollgate {

// The units of envoyproxy/ratelimit. A window is a fixed length: a month is 30 days and a
// year 365 days, as envoyproxy/ratelimit counts them.
enum class EnvoyUnit { kSecond, kMinute, kHour, kDay, kWeek, kMonth, kYear };

// Length of one unit in seconds.
int64_t EnvoyUnitSeconds(EnvoyUnit unit);
// "second", "minute", ...
std::string_view EnvoyUnitName(EnvoyUnit unit);
// Case-insensitive "second" ... "year". nullopt for anything else.
std::optional<EnvoyUnit> ParseEnvoyUnit(std::string_view text);

// Extension: what the Rate Limit Quota Service assigns a rule's buckets while Redis is away
// (src/rlqs/ledger.h): this instance's fallback share (fail_open), DENY_ALL
// (fail_closed), or nothing, so that the assignments Envoy holds expire into its own
// expired_assignment_behavior (expire).
enum class RlqsStoreFailure { kFailOpen, kFailClosed, kExpire };

// A descriptor's `rate_limit:` block.
struct EnvoyRateLimit {
  // Matches, answers OK, counts nothing.
  bool unlimited = false;
  EnvoyUnit unit = EnvoyUnit::kSecond;
  // 0 means every request is over the limit (a block list entry).
  uint32_t requests_per_unit = 0;
  // The window (or a token bucket's refill period) is unit_multiplier units: 30 seconds,
  // 5 minutes. 1 unless set; >= 1, and the window is at most ten years.
  uint32_t unit_multiplier = 1;
  // Optional; `replaces` of other rules refer to it.
  std::string name;
  // Names of rules this one replaces when both match one request.
  std::vector<std::string> replaces;
  // Extension: the algorithm (default a fixed window of one unit, as envoyproxy/ratelimit).
  // A token bucket holds requests_per_unit and refills requests_per_unit per unit.
  Algorithm algorithm = Algorithm::kFixedWindow;
  // Whether the rule names its algorithm; a rule that does not takes the service's default
  // (SetDefaultAlgorithm).
  bool algorithm_given = false;
  // Extensions: what to do when the store fails, and the deadline of one store call.
  FailureMode on_store_failure = FailureMode::kFailOpen;
  int64_t timeout_micros = 10'000;
  // Extension: Limit::durable (answered once a Redis replica holds the count); unset: the
  // store's default.
  std::optional<bool> durable = std::nullopt;
  // Extension (`rlqs_on_store_failure`); unset: as on_store_failure.
  std::optional<RlqsStoreFailure> rlqs_on_store_failure;
};

// One entry of a `descriptors:` list, with its nested list.
struct EnvoyDescriptor {
  std::string key;
  // Empty: any value. With '*' (anywhere, any number of times): a wildcard, each '*'
  // matching any run of characters, possibly empty ("bar*b", "foo*bar*baz", "/api/*").
  std::string value;
  std::optional<EnvoyRateLimit> rate_limit;
  // Decisions are computed and counted, but this rule never refuses.
  bool shadow_mode = false;
  // envoyproxy/ratelimit's quota mode: this rule's refusal refuses the request only when
  // every quota-mode descriptor of the request is refused (rls_plan.h).
  bool quota_mode = false;
  // Only with a wildcard value: every value it matches shares one counter (the wildcard's)
  // instead of one counter per value.
  bool share_threshold = false;
  // The `metadata` map as a JSON object ("{"k":"v",...}"), empty when absent or empty:
  // what envoyproxy/ratelimit returns in the response's dynamic metadata when this
  // descriptor's rule matched and passed. Plain YAML scalars are typed as YAML 1.1 reads
  // them (null, booleans, numbers), quoted ones are strings.
  std::string metadata_json;
  std::vector<EnvoyDescriptor> descriptors;
  // The line it was written on, for messages; 0 when it came from no file (xDS).
  int line = 0;
};

// One file (or one xDS resource): one domain.
struct EnvoyDomainConfig {
  std::string domain;
  // Where it came from, for messages: the file's path, or "xDS resource 'NAME'".
  std::string file_name;
  std::vector<EnvoyDescriptor> descriptors;
};

// Parses `yaml_text`. On failure returns InvalidArgument whose message reads
// "FILE:LINE:COLUMN: FIELD: what was expected", FIELD a path such as
// "descriptors[1].descriptors[0].rate_limit.unit". Unknown keys are errors, as in
// envoyproxy/ratelimit. `detailed_metric` and `value_to_metric` (booleans) are accepted,
// checked and otherwise ignored (docs/envoy.md says why); `metadata` (a map) is kept as
// EnvoyDescriptor::metadata_json.
absl::StatusOr<EnvoyDomainConfig> ParseEnvoyConfig(std::string_view yaml_text,
                                                   std::string_view file_name);

// Reads and parses the file at `path`. NotFound if it cannot be read.
absl::StatusOr<EnvoyDomainConfig> LoadEnvoyConfigFile(const std::string& path);

// Gives every rule of `domains` that names no algorithm `algorithm` (`--default-algorithm`).
void SetDefaultAlgorithm(std::vector<EnvoyDomainConfig>& domains, Algorithm algorithm);

// A wildcard value split at its '*'s: "foo*bar*" -> {"foo", "bar", ""}. A value without '*'
// gives one part.
std::vector<std::string> SplitWildcard(std::string_view pattern);

// Whether `value` matches the wildcard split into `parts` (SplitWildcard), each '*' matching
// any run of characters, possibly empty: starts with the first part, ends with the last, and
// holds the middle ones in order between them without overlap. One part: equality.
// REQUIRES: !parts.empty().
bool WildcardMatches(const std::vector<std::string>& parts, std::string_view value);

enum class ConfigKind {
  kLimits,  // tollgate's own format: top-level `limits:`
  kEnvoy,   // envoyproxy/ratelimit's format: top-level `domain:`
};

// Which format `yaml_text` is written in, from its top-level keys. InvalidArgument naming
// the file when it is not YAML, has both keys, or neither.
absl::StatusOr<ConfigKind> DetectConfigKind(std::string_view yaml_text, std::string_view file_name);

}  // namespace tollgate

#endif  // TOLLGATE_SRC_CONFIG_ENVOY_CONFIG_H_
