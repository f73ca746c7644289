// Copyright tollgate authors. Fuzz target: a config file, in either format, as
// `tollgate serve --config` reads it. Whatever the bytes, parsing returns a value or an
// error status (never throws, crashes or leaks), and an accepted config builds a Limiter
// or a DescriptorMatcher, as serve would.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "src/config/envoy_config.h"
#include "src/server/descriptor_matcher.h"
#include "tollgate/config.h"
#include "tollgate/limiter.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // Both parsers see every input, whichever format DetectConfigKind names.
  (void)tollgate::DetectConfigKind(text, "fuzz.yaml");
  absl::StatusOr<tollgate::Config> config = tollgate::ParseConfig(text, "fuzz.yaml");
  if (config.ok()) {
    (void)tollgate::Limiter::Create(
        {.limits = config->limits, .store = nullptr, .sync_store = nullptr, .clock = nullptr});
  }
  absl::StatusOr<tollgate::EnvoyDomainConfig> envoy = tollgate::ParseEnvoyConfig(text, "fuzz.yaml");
  if (envoy.ok()) {
    std::vector<tollgate::EnvoyDomainConfig> domains = {*envoy, *envoy};
    // Two files with one domain are refused; one builds a matcher.
    (void)tollgate::DescriptorMatcher::Create(domains);
    domains.pop_back();
    (void)tollgate::DescriptorMatcher::Create(std::move(domains));
  }
  return 0;
}
