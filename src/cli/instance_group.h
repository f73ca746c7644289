// Copyright tollgate authors. The group of instances `tollgate serve` counts N in.
#ifndef TOLLGATE_SRC_CLI_INSTANCE_GROUP_H_
#define TOLLGATE_SRC_CLI_INSTANCE_GROUP_H_

#include <string>

#include "src/config/loaded_configs.h"

namespace tollgate::cli {

// The instances that share a fail_open limit's outage budget are those enforcing the same
// limits: N is learned per group (FleetOptions::instance_group), the group named by the limits
// `config` defines (its limit names and Envoy domains, sorted), so an Envoy-only server does
// not count in the N of a `limits:` fleet on the same Redis. The same files give the same
// group on every instance and build: 16 hex digits of a SHA-256, not a process-local hash.
std::string InstanceGroup(const LoadedConfigs& config);

}  // namespace tollgate::cli

#endif  // TOLLGATE_SRC_CLI_INSTANCE_GROUP_H_
