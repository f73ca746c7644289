// Copyright tollgate authors. Everything `tollgate serve` loads from its --config files.
#ifndef TOLLGATE_SRC_CONFIG_LOADED_CONFIGS_H_
#define TOLLGATE_SRC_CONFIG_LOADED_CONFIGS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "src/config/envoy_config.h"
#include "tollgate/limit.h"

namespace tollgate {

struct LoadedConfigs {
  // From files in tollgate's own format (top-level `limits:`), merged.
  std::vector<Limit> limits;
  // From files in Envoy's format (top-level `domain:`), one per domain.
  std::vector<EnvoyDomainConfig> envoy_domains;
  // `memory_store.max_keys` of the one file that sets it; 0 when none does.
  int64_t memory_store_max_keys = 0;
  // Config::durable_positions of every file in tollgate's format, merged.
  std::map<std::string, std::string> durable_positions = {};
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_CONFIG_LOADED_CONFIGS_H_
