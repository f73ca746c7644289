// Copyright tollgate authors. The words of config error messages, shared by both formats.
#ifndef TOLLGATE_SRC_CONFIG_YAML_NODE_H_
#define TOLLGATE_SRC_CONFIG_YAML_NODE_H_

#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "yaml-cpp/yaml.h"

namespace tollgate::config {

// How a node appears after "got" in an error message: 'text' (quoted, cut after 64 bytes),
// "a list", "a map" or "nothing".
std::string Describe(const YAML::Node& node);

// "one of a, b, c".
std::string OneOf(absl::Span<const absl::string_view> words);

// " (did you mean 'word'?)" when one of `allowed` is close to `typed` (a likely typo,
// config_internal::ClosestName), else empty.
std::string DidYouMean(absl::string_view typed, absl::Span<const absl::string_view> allowed);

}  // namespace tollgate::config

#endif  // TOLLGATE_SRC_CONFIG_YAML_NODE_H_
