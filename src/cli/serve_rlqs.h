// Copyright tollgate authors. `tollgate serve`'s Rate Limit Quota Service
// (src/rlqs/service.h): its options (--rlqs-*, and the gRPC port's bounds on streaming
// calls) and its start over the fleet the service runs on.
#ifndef TOLLGATE_SRC_CLI_SERVE_RLQS_H_
#define TOLLGATE_SRC_CLI_SERVE_RLQS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "src/rlqs/ledger.h"
#include "src/rlqs/service.h"
#include "src/server/check_service.h"
#include "src/server/grpc_server.h"
#include "tollgate/fleet.h"
#include "tollgate/timers.h"

namespace CLI {
class App;
}  // namespace CLI

namespace tollgate::cli {

// Adds the --rlqs-* options (writing into `ledger`) and --grpc-max-streaming-calls-per-connection
// and --grpc-max-stream-queued-bytes (into `grpc`) to `serve`.
void AddRlqsFlags(CLI::App& serve, rlqs::RlqsLedgerOptions& ledger,
                  server::GrpcServerOptions& grpc);

// The service over `fleet`: its Redis connections (none: this process alone), N, fail_open's
// shares, the Redis key prefix, rounds on `timers`. Errors as RlqsService::Start.
// REQUIRES: `fleet` and `check_service` outlive the service.
absl::StatusOr<std::unique_ptr<rlqs::RlqsService>> StartRlqs(rlqs::RlqsLedgerOptions options,
                                                             const std::string& key_prefix,
                                                             const Fleet& fleet,
                                                             server::CheckService& check_service,
                                                             std::shared_ptr<Timers> timers);

}  // namespace tollgate::cli

#endif  // TOLLGATE_SRC_CLI_SERVE_RLQS_H_
