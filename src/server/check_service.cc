// Copyright tollgate authors.
#include "src/server/check_service.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/server/metrics.h"
#include "tollgate/memory_store.h"

namespace tollgate::server {

const Limit* CheckSnapshot::FindHttpLimit(std::string_view name) const {
  const Limit* limit = limiter->FindLimit(name);
  if (limit == nullptr || static_cast<size_t>(limit - limiter->limits().data()) >= http_limits) {
    return nullptr;
  }
  return limit;
}

CheckService::CheckService(CheckServiceOptions options)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : &SystemClock()),
      overrides_(options_.max_override_limits, options_.metrics) {}

CheckService::~CheckService() = default;

absl::StatusOr<std::unique_ptr<CheckService>> CheckService::Create(CheckServiceOptions options,
                                                                   LoadedConfigs config) {
  if (options.max_override_limits < 0) {
    return absl::InvalidArgumentError("max_override_limits must be >= 0");
  }
  if (!options.new_limiter) {
    absl::StatusOr<std::unique_ptr<MemoryStore>> memory =
        MemoryStore::Create({.clock = options.clock});
    if (!memory.ok()) return memory.status();
    options.new_limiter = [store = std::shared_ptr<Store>(*std::move(memory)),
                           clock = options.clock](std::vector<Limit> limits) {
      return Limiter::Create({.limits = std::move(limits), .store = store, .clock = clock});
    };
  }
  std::unique_ptr<CheckService> service(new CheckService(std::move(options)));
  if (absl::Status status = service->Reload(std::move(config)); !status.ok()) return status;
  return service;
}

absl::StatusOr<std::shared_ptr<const CheckSnapshot>> CheckService::Build(
    LoadedConfigs config) const {
  SetDefaultAlgorithm(config.envoy_domains, options_.default_envoy_algorithm);
  absl::StatusOr<std::unique_ptr<DescriptorMatcher>> matcher =
      DescriptorMatcher::Create(std::move(config.envoy_domains));
  if (!matcher.ok()) return matcher.status();
  auto snapshot = std::make_shared<CheckSnapshot>();
  snapshot->http_limits = config.limits.size();
  std::vector<Limit> limits = std::move(config.limits);
  // One Limiter for both: a name given to a tollgate limit and to an Envoy rule is refused
  // by Limiter::Create (LoadConfigs refuses it first, naming the files).
  limits.insert(limits.end(), (*matcher)->limits().begin(), (*matcher)->limits().end());
  for (const Limit& limit : limits) {
    if (limit.on_store_failure == FailureMode::kFailClosed && snapshot->fail_closed_limit.empty()) {
      snapshot->fail_closed_limit = limit.name;
    }
  }
  absl::StatusOr<std::unique_ptr<Limiter>> limiter = options_.new_limiter(std::move(limits));
  if (!limiter.ok()) return limiter.status();
  snapshot->limiter = *std::move(limiter);
  snapshot->matcher = *std::move(matcher);
  return snapshot;
}

absl::Status CheckService::Swap(LoadedConfigs files, std::vector<EnvoyDomainConfig> control_plane) {
  LoadedConfigs config = files;
  config.envoy_domains.insert(config.envoy_domains.end(), control_plane.begin(),
                              control_plane.end());
  absl::StatusOr<std::shared_ptr<const CheckSnapshot>> next = Build(std::move(config));
  if (!next.ok()) return next.status();
  if (options_.metrics != nullptr) options_.metrics->RegisterLimits((*next)->limiter->limits());
  snapshot_.store(*std::move(next), std::memory_order_release);
  files_ = std::move(files);
  control_plane_domains_ = std::move(control_plane);
  return absl::OkStatus();
}

absl::Status CheckService::Reload(LoadedConfigs config) {
  absl::MutexLock lock(&reload_mu_);
  return Swap(std::move(config), control_plane_domains_);
}

absl::Status CheckService::ReloadDomains(std::vector<EnvoyDomainConfig> domains) {
  absl::MutexLock lock(&reload_mu_);
  LoadedConfigs files = files_;
  files.envoy_domains = std::move(domains);
  return Swap(std::move(files), control_plane_domains_);
}

absl::Status CheckService::ReloadControlPlaneDomains(std::vector<EnvoyDomainConfig> domains) {
  absl::MutexLock lock(&reload_mu_);
  return Swap(files_, std::move(domains));
}

}  // namespace tollgate::server
