// Copyright tollgate authors.
#include "src/cli/serve_xds.h"

#include <time.h>

#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "spdlog/spdlog.h"

namespace tollgate::cli {
namespace {

// How often the wait for the first config says it still waits.
constexpr absl::Duration kStillWaitingInterval = absl::Minutes(1);

}  // namespace

absl::StatusOr<std::unique_ptr<xds::XdsClient>> StartXdsConfig(const ServeOptions& options,
                                                               server::CheckService& service,
                                                               server::Metrics& metrics) {
  return xds::XdsClient::Start(
      options.xds,
      [&service](std::vector<EnvoyDomainConfig> domains, const std::string& version) {
        return service.ReloadControlPlaneDomains(std::move(domains));
      },
      &metrics);
}

int WaitForFirstXdsConfig(const xds::XdsClient& client, const sigset_t& signals) {
  spdlog::info(
      "xds: waiting for the first config from {} before opening the ports "
      "(--start-without-config serves at once)",
      client.server_address());
  const absl::Time start = absl::Now();
  absl::Time said = start;
  const timespec poll = {0, 100'000'000};  // 100 ms
  while (!client.WaitForConfig(absl::ZeroDuration())) {
    const int signal_number = sigtimedwait(&signals, nullptr, &poll);
    if (signal_number > 0 && signal_number != SIGHUP) return signal_number;
    if (signal_number == SIGHUP) {
      spdlog::info("SIGHUP: the config files are reloaded once the service runs");
    }
    if (absl::Now() - said >= kStillWaitingInterval) {
      said = absl::Now();
      spdlog::warn("xds: still no config from {} after {}", client.server_address(),
                   absl::FormatDuration(absl::Trunc(said - start, absl::Seconds(1))));
    }
  }
  return 0;
}

}  // namespace tollgate::cli
