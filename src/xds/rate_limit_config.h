// Copyright tollgate authors. RateLimitConfig resources received over xDS -> Envoy domains.
//
// A RateLimitConfig (proto/ratelimit/config/ratelimit/v3/rls_conf.proto) says what one file of
// envoyproxy/ratelimit's YAML format says, so it is turned into that YAML tree and parsed by
// the files' own parser (ParseEnvoyConfigTree): the same keys, checks, defaults and semantics
// (shadow_mode, quota_mode, replaces, unlimited, nested descriptors, metadata), and whatever
// option changes how files are read changes xDS resources alike. Errors name the resource and
// the field instead of a file's line and column:
//
//   resource 'eg-rl' (domain 'default'): descriptors[0].rate_limit.unit: expected one of
//   second, minute, hour, day, week, month, year, got 'UNKNOWN'
#ifndef TOLLGATE_SRC_XDS_RATE_LIMIT_CONFIG_H_
#define TOLLGATE_SRC_XDS_RATE_LIMIT_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/any.pb.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "ratelimit/config/ratelimit/v3/rls_conf.pb.h"
#include "src/config/envoy_config.h"
#include "yaml-cpp/yaml.h"

namespace tollgate::xds {

// The type URL of a RateLimitConfig resource.
inline constexpr char kRateLimitConfigTypeUrl[] =
    "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

// The YAML tree of the file that says what `config` says. Proto3 has no "absent" for its
// scalars, so a field at its default is left out, as envoyproxy/ratelimit reads it (an empty
// value is "any value", false is false), except what must be checked even when empty: every
// `key`, every replaced `name`, the `domain`; and `unit` whenever the rule is not unlimited
// (UNKNOWN is written "UNKNOWN", a number outside the enum as that number), and
// `requests_per_unit` whenever it is not unlimited (0: a block-list entry) or is not 0.
// Metadata strings are quoted scalars (never read as numbers or booleans), numbers are written
// with every digit, and map keys are sorted (a protobuf map has no order).
YAML::Node RateLimitConfigToYaml(const ratelimit::config::ratelimit::v3::RateLimitConfig& config);

// "resource 'NAME' (domain 'DOMAIN')", how messages name a resource.
std::string ResourceLabel(const ratelimit::config::ratelimit::v3::RateLimitConfig& config);

// `config` validated and converted as the file of RateLimitConfigToYaml would be. Its
// file_name is "xDS resource 'NAME'" (how a domain also given by a file is reported). On
// failure InvalidArgument, one line per error, each "resource 'NAME' (domain 'DOMAIN'):
// FIELD: what was expected".
absl::StatusOr<EnvoyDomainConfig> ConvertRateLimitConfig(
    const ratelimit::config::ratelimit::v3::RateLimitConfig& config);

// Every resource of one state-of-the-world response, in order: each must be a RateLimitConfig
// that converts, and no two may share a domain (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG is
// not supported, as for files). On failure InvalidArgument naming every bad resource (a
// resource that cannot be decoded is named by its index: "resource #2: ...").
absl::StatusOr<std::vector<EnvoyDomainConfig>> ConvertRateLimitConfigs(
    const google::protobuf::RepeatedPtrField<google::protobuf::Any>& resources);

}  // namespace tollgate::xds

#endif  // TOLLGATE_SRC_XDS_RATE_LIMIT_CONFIG_H_
