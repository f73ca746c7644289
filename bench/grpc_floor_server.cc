// Copyright tollgate authors. The floor of a gRPC unary call in the linked gRPC (Debian's
// 1.51), by server API style: a minimal server of Envoy's rate-limit method
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) that answers every call with
// `overall_code = OK` and nothing else (no descriptor work, no store). For measurement only
// (bench/grpc_floor.sh drives it with bench/grpc_load); not part of `tollgate serve`.
//
//   grpc_floor_server --listen 127.0.0.1:0 --api callback|async|sync [--threads N]
//       [--pending-per-cq N] [--max-threads N] [--max-concurrent-streams N]
//       [--mutex-deadlock-detection default|off]
//
//   callback  RateLimitService::CallbackService; the unary reactor finishes inline
//             (context->DefaultReactor()->Finish(OK)), as `tollgate serve` does for a domain
//             it does not know. --threads is ignored (gRPC runs the callbacks on its own
//             threads).
//   async     RateLimitService::AsyncService: --threads threads (default 2), each polling its
//             own ServerCompletionQueue, with the classic CallData state machine (request,
//             answer, delete); --pending-per-cq calls (default 16) are requested ahead on each
//             queue so that an arriving call rarely waits for a RequestShouldRateLimit.
//   sync      RateLimitService::Service; with --threads N, the sync server's options
//             NUM_CQS = 1, MIN_POLLERS = 1, MAX_POLLERS = N (without it, gRPC's defaults).
//
// For every API: --max-threads N sets the server's grpc::ResourceQuota::SetMaxThreads(N),
// --max-concurrent-streams N the channel argument GRPC_ARG_MAX_CONCURRENT_STREAMS.
// --mutex-deadlock-detection off calls absl::SetMutexDeadlockDetectionMode(kIgnore) before
// gRPC starts: Debian's Abseil is built without NDEBUG, so by default every absl::Mutex lock
// (gRPC core's included) runs the deadlock detector's bookkeeping.
//
// Prints `listening port=NNNN` on stdout (flushed) once the server accepts calls, and shuts
// down (5 s grace) on SIGTERM or SIGINT; exits 0 then, 2 on bad arguments, 1 if it cannot
// listen.
#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "grpc/grpc.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/async_unary_call.h"
#include "grpcpp/support/server_callback.h"
#include "grpcpp/support/status.h"

namespace {

using ::envoy::service::ratelimit::v3::RateLimitRequest;
using ::envoy::service::ratelimit::v3::RateLimitResponse;
using ::envoy::service::ratelimit::v3::RateLimitService;

struct Options {
  std::string listen = "127.0.0.1:0";
  std::string api;
  int threads = 0;  // 0: the API's default (2 for async; gRPC's own for sync)
  int pending_per_cq = 16;
  int max_threads = 0;                   // 0: no ResourceQuota
  int max_concurrent_streams = 0;        // 0: gRPC's default
  bool mutex_deadlock_detection = true;  // false: absl's detector off
};

[[noreturn]] void Usage(const char* message) {
  std::fprintf(stderr,
               "grpc_floor_server: %s\nusage: grpc_floor_server [--listen HOST:PORT] "
               "--api callback|async|sync [--threads N] [--pending-per-cq N] "
               "[--max-threads N] [--max-concurrent-streams N] "
               "[--mutex-deadlock-detection default|off]\n",
               message);
  std::exit(2);
}

int PositiveInt(const char* flag, const char* value) {
  char* end = nullptr;
  const long parsed = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || parsed < 1 || parsed > 100000) {
    Usage((std::string(flag) + " needs a positive integer").c_str());
  }
  return static_cast<int>(parsed);
}

Options ParseOptions(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) Usage(("missing value for " + flag).c_str());
    const char* value = argv[++i];
    if (flag == "--listen") {
      options.listen = value;
    } else if (flag == "--api") {
      options.api = value;
    } else if (flag == "--threads") {
      options.threads = PositiveInt("--threads", value);
    } else if (flag == "--pending-per-cq") {
      options.pending_per_cq = PositiveInt("--pending-per-cq", value);
    } else if (flag == "--max-threads") {
      options.max_threads = PositiveInt("--max-threads", value);
    } else if (flag == "--max-concurrent-streams") {
      options.max_concurrent_streams = PositiveInt("--max-concurrent-streams", value);
    } else if (flag == "--mutex-deadlock-detection") {
      if (std::strcmp(value, "default") != 0 && std::strcmp(value, "off") != 0) {
        Usage("--mutex-deadlock-detection must be default or off");
      }
      options.mutex_deadlock_detection = std::strcmp(value, "default") == 0;
    } else {
      Usage(("unknown flag " + flag).c_str());
    }
  }
  if (options.api != "callback" && options.api != "async" && options.api != "sync") {
    Usage("--api must be callback, async or sync");
  }
  return options;
}

// --api callback: the reactor finishes before ShouldRateLimit returns.
class CallbackFloor final : public RateLimitService::CallbackService {
 public:
  grpc::ServerUnaryReactor* ShouldRateLimit(grpc::CallbackServerContext* context,
                                            const RateLimitRequest* /*request*/,
                                            RateLimitResponse* response) override {
    response->set_overall_code(RateLimitResponse::OK);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

// --api sync: gRPC's sync-server threads call this.
class SyncFloor final : public RateLimitService::Service {
 public:
  grpc::Status ShouldRateLimit(grpc::ServerContext* /*context*/,
                               const RateLimitRequest* /*request*/,
                               RateLimitResponse* response) override {
    response->set_overall_code(RateLimitResponse::OK);
    return grpc::Status::OK;
  }
};

// --api async: one call's life on one completion queue. Its address is the tag of both of
// its operations: the requested call arriving (or failing at shutdown), then the answer
// sent. Owns itself; deleted when the last operation completes.
class CallData {
 public:
  CallData(RateLimitService::AsyncService* service, grpc::ServerCompletionQueue* queue)
      : service_(service), queue_(queue), responder_(&context_) {
    service_->RequestShouldRateLimit(&context_, &request_, &responder_, queue_, queue_, this);
  }
  CallData(const CallData&) = delete;
  CallData& operator=(const CallData&) = delete;

  // Called by the polling thread with the completion of this call's pending operation.
  void Proceed(bool ok) {
    if (state_ == State::kRequested && ok) {
      // Keep as many calls requested on this queue as before.
      new CallData(service_, queue_);
      response_.set_overall_code(RateLimitResponse::OK);
      state_ = State::kFinishing;
      responder_.Finish(response_, grpc::Status::OK, this);
      return;
    }
    // Answer sent, or the request cancelled by shutdown.
    delete this;
  }

 private:
  enum class State { kRequested, kFinishing };

  RateLimitService::AsyncService* const service_;
  grpc::ServerCompletionQueue* const queue_;
  grpc::ServerContext context_;
  RateLimitRequest request_;
  RateLimitResponse response_;
  grpc::ServerAsyncResponseWriter<RateLimitResponse> responder_;
  State state_ = State::kRequested;
};

void PollQueue(grpc::ServerCompletionQueue* queue) {
  void* tag = nullptr;
  bool ok = false;
  while (queue->Next(&tag, &ok)) static_cast<CallData*>(tag)->Proceed(ok);
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = ParseOptions(argc, argv);

  // Every thread (gRPC's included) inherits this mask; only the main thread takes the signals,
  // with sigwait below.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  if (!options.mutex_deadlock_detection) {
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  }

  CallbackFloor callback_service;
  SyncFloor sync_service;
  RateLimitService::AsyncService async_service;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues;

  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials(), &port);
  if (options.max_threads > 0) {
    grpc::ResourceQuota quota("grpc_floor_server");
    quota.SetMaxThreads(options.max_threads);
    builder.SetResourceQuota(quota);
  }
  if (options.max_concurrent_streams > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, options.max_concurrent_streams);
  }
  if (options.api == "callback") {
    builder.RegisterService(&callback_service);
  } else if (options.api == "sync") {
    builder.RegisterService(&sync_service);
    if (options.threads > 0) {
      builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::NUM_CQS, 1);
      builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 1);
      builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS,
                                  options.threads);
    }
  } else {
    builder.RegisterService(&async_service);
    const int threads = options.threads > 0 ? options.threads : 2;
    for (int i = 0; i < threads; ++i) queues.push_back(builder.AddCompletionQueue());
  }

  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "grpc_floor_server: cannot listen on %s\n", options.listen.c_str());
    return 1;
  }

  std::vector<std::thread> pollers;
  for (const std::unique_ptr<grpc::ServerCompletionQueue>& queue : queues) {
    for (int i = 0; i < options.pending_per_cq; ++i) new CallData(&async_service, queue.get());
    pollers.emplace_back(PollQueue, queue.get());
  }

  std::printf("listening port=%d\n", port);
  std::fflush(stdout);

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);

  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  // The queues shut down after the server (gRPC's rule); their threads then delete the
  // remaining CallData and return.
  for (const std::unique_ptr<grpc::ServerCompletionQueue>& queue : queues) queue->Shutdown();
  for (std::thread& poller : pollers) poller.join();
  server->Wait();
  return 0;
}
