// Copyright tollgate authors.
#include "src/cli/serve.h"

#include <signal.h>

#include <chrono>
#include <memory>
#include <utility>

#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"
#include "src/cli/load_configs.h"
#include "src/server/http_server.h"
#include "src/server/listen_address.h"
#include "src/server/rls_service.h"
#include "tollgate/limiter.h"

namespace tollgate::cli {
namespace {

// How long a shutdown waits for requests in flight before it drops them.
constexpr std::chrono::seconds kDrainTimeout(10);

}  // namespace

int RunServe(const ServeOptions& options) {
  // Block the stop signals before any thread starts, so every thread inherits the mask and
  // only the sigwait below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  absl::StatusOr<server::ListenAddress> http_address =
      server::ParseListenAddress(options.http_address);
  if (!http_address.ok()) {
    spdlog::error("--http: {}", std::string(http_address.status().message()));
    return 2;
  }
  absl::StatusOr<server::ListenAddress> grpc_address =
      server::ParseListenAddress(options.grpc_address);
  if (!grpc_address.ok()) {
    spdlog::error("--grpc: {}", std::string(grpc_address.status().message()));
    return 2;
  }

  absl::StatusOr<LoadedConfigs> config = LoadConfigs(options.config_paths);
  if (!config.ok()) {
    spdlog::error("invalid config: {}", std::string(config.status().message()));
    return 1;
  }
  absl::StatusOr<ServeStore> store = MakeStore(options);
  if (!store.ok()) {
    spdlog::error("{}", std::string(store.status().message()));
    return store.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  absl::StatusOr<std::unique_ptr<Limiter>> limiter =
      Limiter::Create({.limits = config->limits, .store = store->store, .clock = nullptr});
  if (!limiter.ok()) {
    spdlog::error("invalid config: {}", std::string(limiter.status().message()));
    return 1;
  }

  // Envoy's rate-limit service, on the same store (the same counters as HTTP).
  server::RlsServerOptions rls_options;
  rls_options.address = server::FormatListenAddress(grpc_address->host, grpc_address->port);
  rls_options.service.domains = config->envoy_domains;
  rls_options.service.store = store->store;
  rls_options.service.shadow_mode = options.shadow_mode;
  absl::StatusOr<std::unique_ptr<server::RlsServer>> rls =
      server::RlsServer::Start(std::move(rls_options));
  if (!rls.ok()) {
    spdlog::error("{}", std::string(rls.status().message()));
    return 1;
  }

  server::HttpServerOptions http_options;
  http_options.host = http_address->host;
  http_options.port = http_address->port;
  http_options.threads = options.threads;
  http_options.rls_service = &(*rls)->service();
  absl::StatusOr<std::unique_ptr<server::HttpServer>> http = server::HttpServer::Start(
      std::move(http_options), std::shared_ptr<Limiter>(*std::move(limiter)));
  if (!http.ok()) {
    spdlog::error("{}", std::string(http.status().message()));
    return 1;
  }
  spdlog::info("{} limits and {} Envoy domains from {}, store {}", config->limits.size(),
               config->envoy_domains.size(), absl::StrJoin(options.config_paths, ", "),
               store->store->Name());
  // Tests and scripts read these lines to learn the ports (with HOST:0).
  spdlog::info("listening grpc={}",
               server::FormatListenAddress(grpc_address->host, (*rls)->Port()));
  spdlog::info("listening http={}", (*http)->address());

  int signal_number = 0;
  while (sigwait(&stop_signals, &signal_number) != 0) {
  }
  spdlog::info("received {}, finishing requests in flight",
               signal_number == SIGTERM ? "SIGTERM" : "SIGINT");
  (*http)->Shutdown();
  bool drained = (*http)->Wait(kDrainTimeout);
  if (!drained)
    spdlog::warn("requests still in flight after {}s were dropped", kDrainTimeout.count());
  // The HTTP server goes first: /json calls into the gRPC service.
  http->reset();
  (*rls)->Shutdown();
  spdlog::info("stopped");
  return 0;
}

}  // namespace tollgate::cli
