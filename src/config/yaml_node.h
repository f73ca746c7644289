// Copyright tollgate authors. Helpers for config error messages about YAML nodes.
#ifndef TOLLGATE_SRC_CONFIG_YAML_NODE_H_
#define TOLLGATE_SRC_CONFIG_YAML_NODE_H_

#include <string>

#include "yaml-cpp/yaml.h"

namespace tollgate::config {

// How a node appears after "got" in an error message: 'text' (quoted, cut after 64 bytes),
// "a list", "a map" or "nothing".
std::string DescribeNode(const YAML::Node& node);

}  // namespace tollgate::config

#endif  // TOLLGATE_SRC_CONFIG_YAML_NODE_H_
