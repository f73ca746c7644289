// Copyright tollgate authors. The parser of envoyproxy/ratelimit's format (envoy_config.h),
// shared by its files: the file or tree's root (envoy_config.cc), a descriptor list
// (envoy_descriptors.cc) and a `rate_limit:` block (envoy_rate_limit.cc).
#ifndef TOLLGATE_SRC_CONFIG_ENVOY_PARSER_H_
#define TOLLGATE_SRC_CONFIG_ENVOY_PARSER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "src/config/envoy_config.h"
#include "src/config/problems.h"
#include "yaml-cpp/yaml.h"

namespace tollgate::config {

// Reads one domain's config and records every error of it. A check that fails records its
// error (Fail) and returns it; the part of the config that check belongs to is abandoned,
// and the parse goes on with the next independent part, so that one run reports every error.
// Without positions (a tree built in memory has none) errors name the field only.
// yaml-cpp's own exceptions are caught by Parse alone. One per parse; not thread-safe.
class EnvoyParser {
 public:
  EnvoyParser(std::string_view file_name, bool positions);

  // The whole config: `root`'s domain and descriptors.
  absl::StatusOr<EnvoyDomainConfig> Parse(const YAML::Node& root);

  // Records "FIELD: WHAT" at `node` (no position without positions) and returns it.
  absl::Status Fail(const YAML::Node& node, absl::string_view field, absl::string_view what);
  // Fail, when the caller goes on.
  void Report(const YAML::Node& node, absl::string_view field, absl::string_view what);

  // A `descriptors:` list. An error only when it is not a list; each entry's own errors are
  // recorded, and the other entries, and the entry's other fields, are still read.
  absl::StatusOr<std::vector<EnvoyDescriptor>> ParseDescriptors(const YAML::Node& node,
                                                                const std::string& field);
  // A `rate_limit:` block. An error only when it is not a map; each field's own errors are
  // recorded, and the other fields are still read.
  absl::StatusOr<EnvoyRateLimit> ParseRateLimit(const YAML::Node& node, const std::string& field);

  // An error when `node` is not a map. Each of its keys that is not in `allowed`, or is
  // repeated, is an error of its own (recorded, with the closest allowed key as a suggestion)
  // and the map's other keys are still read.
  absl::Status CheckMap(const YAML::Node& node, absl::string_view field,
                        absl::Span<const absl::string_view> allowed);
  // `node` as a string, a boolean (YAML 1.1's words) or a whole number from 0 to 2^32 - 1;
  // else the error, recorded.
  absl::StatusOr<std::string> Scalar(const YAML::Node& node, absl::string_view field);
  absl::StatusOr<bool> Bool(const YAML::Node& node, absl::string_view field);
  absl::StatusOr<uint32_t> Uint32(const YAML::Node& node, absl::string_view field);

  bool positions() const { return positions_; }

 private:
  const std::string file_name_;
  Problems problems_;
  const bool positions_;
};

}  // namespace tollgate::config

#endif  // TOLLGATE_SRC_CONFIG_ENVOY_PARSER_H_
