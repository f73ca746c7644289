// Copyright tollgate authors. `tollgate serve`'s config over xDS (ServeOptions::xds): the
// client that feeds the check service the control plane's domains, the wait for its first
// config before the ports open, and what /readyz says until then.
#ifndef TOLLGATE_SRC_CLI_SERVE_XDS_H_
#define TOLLGATE_SRC_CLI_SERVE_XDS_H_

#include <signal.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "src/cli/serve.h"
#include "src/server/check_service.h"
#include "src/server/metrics.h"
#include "src/xds/ads_client.h"

namespace tollgate::cli {

// What GET /readyz adds while no config has come over xDS yet (with start_without_config).
inline constexpr char kNoXdsConfigYet[] = "no config from xDS yet: answering OK with no limits";

// Starts the xDS client of `options.xds`: each config it receives replaces `service`'s
// control-plane domains (CheckService::ReloadControlPlaneDomains), so a domain also given by
// a --config file is NACKed naming the file. REQUIRES: options.xds.server_address is set;
// `service` and `metrics` outlive the client. InvalidArgument or NotFound for unusable
// options (XdsClient::Start).
absl::StatusOr<std::unique_ptr<xds::XdsClient>> StartXdsConfig(const ServeOptions& options,
                                                               server::CheckService& service,
                                                               server::Metrics& metrics);

// Blocks until `client` has applied its first config, logging that it waits (and every
// minute that it still does), with no bound: as envoyproxy/ratelimit, the ports open with a
// config or not at all. Returns 0 then; or, when one of `signals` other than SIGHUP arrives
// first (SIGTERM, SIGINT), that signal's number. SIGHUP is taken and ignored meanwhile: files
// that change are reloaded once the service runs. REQUIRES: `signals` are blocked.
int WaitForFirstXdsConfig(const xds::XdsClient& client, const sigset_t& signals);

}  // namespace tollgate::cli

#endif  // TOLLGATE_SRC_CLI_SERVE_XDS_H_
