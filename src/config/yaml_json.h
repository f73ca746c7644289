// Copyright tollgate authors. A YAML tree as JSON: a descriptor's `metadata`, which
// envoyproxy/ratelimit returns as JSON in the response's dynamic metadata.
#ifndef TOLLGATE_SRC_CONFIG_YAML_JSON_H_
#define TOLLGATE_SRC_CONFIG_YAML_JSON_H_

#include <string>

#include "yaml-cpp/yaml.h"

namespace tollgate::config {

// Appends `node` as JSON to `out`: maps as objects, sequences as arrays; a plain scalar as
// null, a boolean (true/false, yes/no, on/off in any case, as YAML 1.1) or a number when it
// reads as one, else (and always when quoted) a string.
void AppendYamlAsJson(const YAML::Node& node, std::string& out);

}  // namespace tollgate::config

#endif  // TOLLGATE_SRC_CONFIG_YAML_JSON_H_
