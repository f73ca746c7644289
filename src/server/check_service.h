// Copyright tollgate authors. The one check service behind every front end of `serve`.
//
// A CheckService owns the running configuration as one immutable snapshot: tollgate's own
// limits (HTTP /v1/check), the Envoy descriptor matcher (POST /json, gRPC ShouldRateLimit),
// ONE Limiter that holds both sets of limits over the exact store and the sync store, and
// what readiness needs to know. The adapters (src/server/http_handler.h,
// src/server/rls_service.h) read the snapshot once per request and only parse, plan, check
// and render.
//
//   auto service = CheckService::Create(
//       {.new_limiter = [&](std::vector<Limit> limits) { return fleet->NewLimiter(limits); }},
//       *LoadConfigs(paths));
//   std::shared_ptr<const CheckSnapshot> now = (*service)->snapshot();
//   now->limiter->CheckAsync(*now->FindHttpLimit("api"), "user:42", 1, done);
//   ... on SIGHUP:
//   absl::Status status = (*service)->Reload(*LoadConfigs(paths));  // old one kept on error
#ifndef TOLLGATE_SRC_SERVER_CHECK_SERVICE_H_
#define TOLLGATE_SRC_SERVER_CHECK_SERVICE_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "src/config/loaded_configs.h"
#include "src/server/descriptor_matcher.h"
#include "src/server/rls_plan.h"
#include "tollgate/clock.h"
#include "tollgate/limiter.h"
#include "tollgate/store.h"

namespace tollgate::server {

class Metrics;

// Makes the Limiter of one snapshot's limits, over the stores the process counts in (in
// `tollgate serve`, Fleet::NewLimiter: the same stores at every reload). InvalidArgument as
// Limiter::Create.
using LimiterFactory =
    std::function<absl::StatusOr<std::unique_ptr<Limiter>>(std::vector<Limit> limits)>;

struct CheckServiceOptions {
  // Where every snapshot's limits (tollgate's and Envoy rules') are counted. Empty: limiters
  // over one in-memory store of the service's own, on `clock`. REQUIRES: what it makes
  // limiters over outlives the service.
  LimiterFactory new_limiter;
  // Time for the in-memory store made when `new_limiter` is empty, and for Envoy's block-list
  // rules' reset times. nullptr: SystemClock(). REQUIRES: outlives the service.
  Clock* clock = nullptr;
  // When set, every (re)loaded limit and each new override limit is registered.
  // REQUIRES: outlives the service.
  Metrics* metrics = nullptr;
  // Bound on the distinct Envoy `limit` overrides (requests_per_unit, unit) remembered over
  // the life of the service (see OverrideLimits).
  int max_override_limits = 1000;
  // The algorithm of Envoy rules that name none (SetDefaultAlgorithm), at every (re)load.
  Algorithm default_envoy_algorithm = Algorithm::kFixedWindow;
};

// One configuration, as it serves. Immutable; shared by the requests that started on it.
struct CheckSnapshot {
  // limits() = tollgate's limits, then one per counting Envoy rule.
  std::unique_ptr<Limiter> limiter;
  std::unique_ptr<DescriptorMatcher> matcher;
  // limiter->limits()[0, http_limits) are tollgate's own: the ones /v1/check may name.
  size_t http_limits = 0;
  // A limit (tollgate's or an Envoy rule's) that fails closed, or "" (for GET /readyz).
  std::string fail_closed_limit;

  // The tollgate limit named `name` (not an Envoy rule's), or nullptr. Lives as long as the
  // snapshot.
  const Limit* FindHttpLimit(std::string_view name) const;
};

// Thread-safe: every method may be called concurrently; requests never take a lock.
class CheckService {
 public:
  // The service serving `config`. InvalidArgument (naming the limit or domain) when the
  // config cannot be served, as Reload.
  static absl::StatusOr<std::unique_ptr<CheckService>> Create(CheckServiceOptions options,
                                                              LoadedConfigs config);

  CheckService(const CheckService&) = delete;
  CheckService& operator=(const CheckService&) = delete;
  ~CheckService();

  // The running config has two parts: what files give (`config`: limits and Envoy domains)
  // and the Envoy domains a control plane gives over xDS. Each reload replaces one part and
  // keeps the other. A reload validates the whole (limits, every domain, one Limiter over
  // both; a domain in both parts is refused, naming the file and the resource) and only then
  // swaps it in: requests that start after it returns see the new snapshot, those in flight
  // finish on theirs. Counters live in the stores, so a limit whose name and numbers are
  // unchanged carries on. On error nothing changes and the error is returned.

  // Replaces the files' part.
  absl::Status Reload(LoadedConfigs config);

  // Replaces the files' Envoy domains only, keeping their limits (RlsService::UpdateDomains).
  absl::Status ReloadDomains(std::vector<EnvoyDomainConfig> domains);

  // Replaces the control plane's domains (src/xds/ads_client.h) as one set.
  absl::Status ReloadControlPlaneDomains(std::vector<EnvoyDomainConfig> domains);

  // The running snapshot: one atomic load. Never null.
  std::shared_ptr<const CheckSnapshot> snapshot() const {
    return snapshot_.load(std::memory_order_acquire);
  }

  // Envoy's per-descriptor `limit` overrides, shared by every snapshot.
  OverrideLimits& overrides() { return overrides_; }
  // The clock given in the options, or SystemClock().
  Clock& clock() const { return *clock_; }
  Metrics* metrics() const { return options_.metrics; }

 private:
  explicit CheckService(CheckServiceOptions options);
  absl::StatusOr<std::shared_ptr<const CheckSnapshot>> Build(LoadedConfigs config) const;
  // Builds the snapshot of both parts and, when it is valid, swaps it in and keeps them.
  absl::Status Swap(LoadedConfigs files, std::vector<EnvoyDomainConfig> control_plane)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(reload_mu_);

  const CheckServiceOptions options_;
  Clock* const clock_;
  OverrideLimits overrides_;
  absl::Mutex reload_mu_;  // one reload at a time (each reads a part, then swaps)
  LoadedConfigs files_ ABSL_GUARDED_BY(reload_mu_);
  std::vector<EnvoyDomainConfig> control_plane_domains_ ABSL_GUARDED_BY(reload_mu_);
  std::atomic<std::shared_ptr<const CheckSnapshot>> snapshot_;
};

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_CHECK_SERVICE_H_
