// Copyright tollgate authors. envoyproxy/ratelimit's format from a YAML tree built in memory
// rather than read from a file: how a RateLimitConfig received over xDS is validated
// (src/xds/rate_limit_config.h) by the very parser of the files (envoy_config.h).
#ifndef TOLLGATE_SRC_CONFIG_ENVOY_CONFIG_TREE_H_
#define TOLLGATE_SRC_CONFIG_ENVOY_CONFIG_TREE_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "src/config/envoy_config.h"
#include "yaml-cpp/yaml.h"

namespace tollgate {

// Parses `root` exactly as ParseEnvoyConfig parses a file's document: the same keys, checks,
// defaults and messages, except that a tree has no positions, so each error reads
// "SOURCE: FIELD: what was expected" (FIELD such as "descriptors[0].rate_limit.unit"), and
// a wildcard that can never match names the earlier one by its field instead of its line.
// `source_name` names the tree in messages and becomes EnvoyDomainConfig::file_name (which a
// domain given twice is reported by). Every EnvoyDescriptor::line is 0. On failure:
// InvalidArgument with one line per error.
absl::StatusOr<EnvoyDomainConfig> ParseEnvoyConfigTree(const YAML::Node& root,
                                                       std::string_view source_name);

}  // namespace tollgate

#endif  // TOLLGATE_SRC_CONFIG_ENVOY_CONFIG_TREE_H_
