// Copyright tollgate authors. tiffin-app: one of Tiffin's stateless app servers, for the demo.
//
// It checks its limits in process with the tollgate library, as the seed's servers do:
//   GET /menu     api_per_user keyed by the X-User header
//   GET /order    api_per_user and orders_per_user (all or nothing), keyed by X-User
//   GET /otp      otp_per_phone keyed by X-Phone
//   GET /partner  partner_hot_key keyed by X-Partner (sync mode with --store redis)
//   GET /partner?exact=1  partner_exact keyed by X-Partner: partner_hot_key's numbers in
//                 exact mode (one Redis call per request), added here for the comparison
//   GET /partner?shares=equal, /partner?exact=1&shares=equal  their twins with
//                 `shares: equal` (limit / N per instance in sync mode and in the fail_open
//                 fallback), partner_hot_key_equal and partner_exact_equal, for the skew demo
//   GET /chat?tokens=MIN-MAX&ms=MIN-MAX  an LLM gateway's call, keyed by X-Tenant: one
//                 all-or-nothing check of assistant_requests (one request),
//                 assistant_tokens (a look: refused while the tenant's tokens are in debt)
//                 and assistant_streams (a concurrency lease); then it "streams" a response
//                 for a random MIN-MAX ms of a random MIN-MAX tokens, charges those tokens
//                 to assistant_tokens (Limiter::Charge) and releases the lease. Its answer
//                 carries X-Tokens; X-Decided-At is when the tokens were charged.
//   GET /leases?tenant=T  the leases this server holds for tenant T right now (its streams
//                 in flight): their count, then their ids, one per line
//   GET /healthz  always 200
// and answers 200, 429 (over the limit, with Retry-After), 503 (a fail_closed limit whose
// store is unavailable), 400 (missing key header) or 500 (any other error). Every answer
// carries X-Server (--name), X-Decision-Source (memory, redis, fallback...) and
// X-Decided-At (wall-clock microseconds when the limiter answered) and X-Reset-At
// (X-Decided-At + the deciding limit's reset_after: the end of its window, for a window).
//
//   tiffin-app --port 9001 --config examples/tiffin.yaml --store memory --name app1
//   tiffin-app --port 9001 --config examples/tiffin.yaml --store split --servers 8
//   tiffin-app --port 9001 --config examples/tiffin.yaml --store redis --redis redis://...
//
// Stores: `memory` gives each server its own full buckets (the fleet admits N times the
// limit); `split` gives each server limit / N (no shared state); `redis` shares the limits
// through tollgate::Fleet, the stack `tollgate serve --redis` runs (RedisStore behind
// ResilientStore, `mode: sync` limits in a SyncStore, N learned by heartbeats or fixed by
// --servers).
//
// One thread per connection with blocking I/O: the load balancer keeps a few keep-alive
// connections to each server, and a check blocks for at most the limit's deadline. The
// process exits at once on SIGTERM or SIGINT; it holds nothing that needs flushing.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "tollgate/tollgate.h"

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct AppOptions {
  int port = 0;
  std::string config_path = "examples/tiffin.yaml";
  std::string store = "memory";  // memory | split | redis
  std::string redis_url;
  // split: the divisor of every limit; redis: a fixed instance count (0: learn it).
  int64_t servers = 0;
  // redis with a learned N: the period over which fail_open's demand-weighted shares are
  // learned (InstanceRegistryOptions::demand_period_ms); heartbeats come 4 times in one.
  int64_t demand_period_ms = 10'000;
  std::string name = "tiffin-app";
};

void Usage() {
  std::fprintf(stderr,
               "usage: tiffin-app --port N [--config FILE] [--store memory|split|redis]\n"
               "                  [--redis URL] [--servers N] [--name NAME]\n"
               "                  [--demand-period-ms MS]\n");
}

// Parses argv into `options`; false (after printing why) on anything unusable.
bool ParseFlags(int argc, char** argv, AppOptions& options) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "tiffin-app: %s needs a value\n", flag.c_str());
      return false;
    }
    const std::string value = argv[++i];
    if (flag == "--port") {
      if (!absl::SimpleAtoi(value, &options.port) || options.port <= 0) return false;
    } else if (flag == "--config") {
      options.config_path = value;
    } else if (flag == "--store") {
      options.store = value;
    } else if (flag == "--redis") {
      options.redis_url = value;
    } else if (flag == "--demand-period-ms") {
      if (!absl::SimpleAtoi(value, &options.demand_period_ms) || options.demand_period_ms < 200) {
        return false;
      }
    } else if (flag == "--servers") {
      if (!absl::SimpleAtoi(value, &options.servers) || options.servers < 0) return false;
    } else if (flag == "--name") {
      options.name = value;
    } else {
      std::fprintf(stderr, "tiffin-app: unknown flag %s\n", flag.c_str());
      return false;
    }
  }
  if (options.port == 0) return false;
  if (options.store != "memory" && options.store != "split" && options.store != "redis") {
    std::fprintf(stderr, "tiffin-app: --store must be memory, split or redis\n");
    return false;
  }
  if (options.store == "redis" && options.redis_url.empty()) {
    std::fprintf(stderr, "tiffin-app: --store redis needs --redis URL\n");
    return false;
  }
  if (options.store == "split" && options.servers < 1) {
    std::fprintf(stderr, "tiffin-app: --store split needs --servers N (N >= 1)\n");
    return false;
  }
  return true;
}

// This server's share of a limit when it is split across `servers` with no shared state:
// capacity, refill and window limits divided by N, never below 1 (a share of 0 would
// refuse everything).
void SplitNumbers(tollgate::LimitNumbers& numbers, int64_t servers) {
  numbers.capacity = std::max<int64_t>(1, numbers.capacity / servers);
  numbers.refill_per_second = numbers.refill_per_second / static_cast<double>(servers);
  numbers.limit = std::max<int64_t>(1, numbers.limit / servers);
}

using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

struct Route {
  std::string_view header;               // the key's header
  std::vector<std::string_view> limits;  // checked together, all or nothing
};

// The name of the exact twin of partner_hot_key that /partner?exact=1 checks.
constexpr std::string_view kPartnerExact = "partner_exact";
// The twins with `shares: equal` of partner_hot_key and partner_exact.
constexpr std::string_view kEqualSuffix = "_equal";

// The limits an endpoint checks, or nullptr for an unknown path.
const Route* FindRoute(std::string_view path) {
  static const Route kMenu{"X-User", {"api_per_user"}};
  static const Route kOrder{"X-User", {"api_per_user", "orders_per_user"}};
  static const Route kOtp{"X-Phone", {"otp_per_phone"}};
  static const Route kPartner{"X-Partner", {"partner_hot_key"}};
  static const Route kPartnerExactRoute{"X-Partner", {kPartnerExact}};
  static const Route kPartnerEqual{"X-Partner", {"partner_hot_key_equal"}};
  static const Route kPartnerExactEqual{"X-Partner", {"partner_exact_equal"}};
  if (path == "/partner?exact=1") return &kPartnerExactRoute;
  if (path == "/partner?shares=equal") return &kPartnerEqual;
  if (path == "/partner?exact=1&shares=equal") return &kPartnerExactEqual;
  const std::string_view bare = path.substr(0, path.find('?'));
  if (bare == "/menu") return &kMenu;
  if (bare == "/order") return &kOrder;
  if (bare == "/otp") return &kOtp;
  if (bare == "/partner") return &kPartner;
  return nullptr;
}

Response Answer(const Request& request, http::status status, std::string body) {
  Response response{status, request.version()};
  response.set(http::field::content_type, "text/plain");
  response.keep_alive(request.keep_alive());
  response.body() = std::move(body);
  response.body().push_back('\n');
  return response;
}

int64_t WallMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The leases of assistant_streams this server holds per tenant (streams in flight), for
// GET /leases.
class HeldLeases {
 public:
  void Add(const std::string& tenant, const std::string& lease) {
    absl::MutexLock lock(&mu_);
    held_[tenant].insert(lease);
  }
  void Remove(const std::string& tenant, const std::string& lease) {
    absl::MutexLock lock(&mu_);
    held_[tenant].erase(lease);
  }
  // "<count>\n<id>\n<id>...": the body of GET /leases.
  std::string Describe(const std::string& tenant) {
    absl::MutexLock lock(&mu_);
    auto it = held_.find(tenant);
    if (it == held_.end()) return "0";
    return absl::StrCat(it->second.size(), it->second.empty() ? "" : "\n",
                        absl::StrJoin(it->second, "\n"));
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, absl::flat_hash_set<std::string>> held_ ABSL_GUARDED_BY(mu_);
};
HeldLeases held_leases;

// The MIN-MAX range of query parameter `name` in `target` (a single value N is N-N);
// `fallback` when absent or malformed.
std::pair<int64_t, int64_t> QueryRange(std::string_view target, std::string_view name,
                                       std::pair<int64_t, int64_t> fallback) {
  const size_t query = target.find('?');
  if (query == std::string_view::npos) return fallback;
  const absl::string_view params(target.data() + query + 1, target.size() - query - 1);
  for (absl::string_view pair : absl::StrSplit(params, '&')) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(pair, absl::MaxSplits('=', 1));
    if (kv.first != absl::string_view(name.data(), name.size())) continue;
    std::pair<absl::string_view, absl::string_view> bounds =
        absl::StrSplit(kv.second, absl::MaxSplits('-', 1));
    if (bounds.second.empty()) bounds.second = bounds.first;
    int64_t low = 0;
    int64_t high = 0;
    if (absl::SimpleAtoi(bounds.first, &low) && absl::SimpleAtoi(bounds.second, &high) &&
        low >= 0 && low <= high && high <= 600'000) {
      return {low, high};
    }
  }
  return fallback;
}

// The answer to an admitted or refused batch of checks decided at `decided_at_micros`: 200,
// 429 or 503 (the first refusal's reason), with Retry-After, X-Decision-Source, X-Decided-At
// and X-Reset-At (see the file comment).
Response Decided(const Request& request, const tollgate::MultiDecision& result,
                 int64_t decided_at_micros) {
  const tollgate::Decision* refusal = nullptr;
  for (const tollgate::Decision& decision : result.decisions) {
    if (!decision.allowed && refusal == nullptr) refusal = &decision;
  }
  Response response = [&] {
    if (result.allowed) return Answer(request, http::status::ok, "ok");
    if (refusal != nullptr && refusal->reason == tollgate::DenyReason::kStoreUnavailable) {
      return Answer(request, http::status::service_unavailable, "limits unavailable, try later");
    }
    return Answer(request, http::status::too_many_requests, "rate limited");
  }();
  if (refusal != nullptr && refusal->retry_after_micros > 0) {
    const int64_t seconds = (refusal->retry_after_micros + 999'999) / 1'000'000;
    response.set(http::field::retry_after, std::to_string(seconds));
  }
  const tollgate::Decision& first = refusal != nullptr ? *refusal : result.decisions.front();
  const std::string_view source = tollgate::DecisionSourceName(first.source);
  response.set("X-Decision-Source", beast::string_view(source.data(), source.size()));
  response.set("X-Decided-At", std::to_string(decided_at_micros));
  response.set("X-Reset-At", std::to_string(decided_at_micros + first.reset_after_micros));
  return response;
}

// GET /chat: see the file comment.
Response HandleChat(tollgate::Limiter& limiter, const Request& request, std::string_view target,
                    const std::string& tenant) {
  const std::vector<tollgate::CheckRequest> checks = {
      {.limit = "assistant_requests", .key = tenant, .cost = 1},
      {.limit = "assistant_tokens", .key = tenant, .cost = 0},
      {.limit = "assistant_streams", .key = tenant, .cost = 1},
  };
  absl::StatusOr<tollgate::MultiDecision> result = limiter.CheckAll(checks);
  if (absl::IsUnavailable(result.status())) {
    return Answer(request, http::status::service_unavailable, result.status().ToString());
  }
  if (!result.ok()) {
    return Answer(request, http::status::internal_server_error, result.status().ToString());
  }
  if (!result->allowed) return Decided(request, *result, WallMicros());
  const std::string lease = result->tokens[2];
  held_leases.Add(tenant, lease);
  thread_local std::mt19937_64 random(std::random_device{}());
  const auto [min_tokens, max_tokens] = QueryRange(target, "tokens", {100, 500});
  const auto [min_ms, max_ms] = QueryRange(target, "ms", {200, 1000});
  const int64_t tokens = std::uniform_int_distribution<int64_t>(min_tokens, max_tokens)(random);
  std::this_thread::sleep_for(
      std::chrono::milliseconds(std::uniform_int_distribution<int64_t>(min_ms, max_ms)(random)));
  // The response is done: its tokens are charged whatever is left (the tenant may go into
  // debt, and its next call waits it out), then the slot is freed.
  absl::StatusOr<tollgate::Decision> charged = limiter.Charge("assistant_tokens", tenant, tokens);
  const int64_t charged_at = WallMicros();
  (void)limiter.Release("assistant_streams", tenant, lease);
  held_leases.Remove(tenant, lease);
  if (!charged.ok()) {
    return Answer(request, http::status::internal_server_error, charged.status().ToString());
  }
  Response response = Answer(request, http::status::ok, "streamed");
  response.set("X-Tokens", std::to_string(tokens));
  response.set("X-Decided-At", std::to_string(charged_at));
  return response;
}

Response Handle(tollgate::Limiter& limiter, const Request& request) {
  const std::string_view target(request.target().data(), request.target().size());
  if (target == "/healthz") return Answer(request, http::status::ok, "ok");
  if (target.substr(0, target.find('?')) == "/leases") {
    const size_t at = target.find("tenant=");
    const std::string tenant(at == std::string_view::npos ? "" : target.substr(at + 7));
    return Answer(request, http::status::ok, held_leases.Describe(tenant));
  }
  if (target.substr(0, target.find('?')) == "/chat") {
    const auto tenant = request.find("X-Tenant");
    if (tenant == request.end() || tenant->value().empty()) {
      return Answer(request, http::status::bad_request, "missing X-Tenant");
    }
    return HandleChat(limiter, request, target,
                      std::string(tenant->value().data(), tenant->value().size()));
  }
  const Route* route = FindRoute(target);
  if (route == nullptr) return Answer(request, http::status::not_found, "no such endpoint");
  const auto header = request.find(beast::string_view(route->header.data(), route->header.size()));
  if (header == request.end() || header->value().empty()) {
    return Answer(request, http::status::bad_request, "missing " + std::string(route->header));
  }
  const std::string key(header->value().data(), header->value().size());
  std::vector<tollgate::CheckRequest> checks;
  for (std::string_view limit : route->limits) {
    checks.push_back({.limit = limit, .key = key, .cost = 1});
  }
  absl::StatusOr<tollgate::MultiDecision> result = limiter.CheckAll(checks);
  // When the decision was made (wall clock, the limiter's clock here), for tiffin-load to
  // count each answer in the window that decided it.
  const int64_t decided_at_micros = WallMicros();
  if (!result.ok()) {
    return Answer(request, http::status::internal_server_error, result.status().ToString());
  }
  return Decided(request, *result, decided_at_micros);
}

// Serves one connection until the peer closes it or stops keeping it alive.
void Serve(tcp::socket socket, tollgate::Limiter& limiter, const std::string& name) {
  beast::flat_buffer buffer;
  beast::error_code error;
  for (;;) {
    Request request;
    http::read(socket, buffer, request, error);
    if (error) break;
    Response response = Handle(limiter, request);
    response.set("X-Server", name);
    response.prepare_payload();
    http::write(socket, response, error);
    if (error || !response.keep_alive()) break;
  }
  socket.shutdown(tcp::socket::shutdown_both, error);
}

}  // namespace

int main(int argc, char** argv) {
  AppOptions options;
  if (!ParseFlags(argc, argv, options)) {
    Usage();
    return 2;
  }
  absl::StatusOr<tollgate::Config> config = tollgate::LoadConfigFile(options.config_path);
  if (!config.ok()) {
    std::fprintf(stderr, "tiffin-app: %s\n", config.status().ToString().c_str());
    return 1;
  }
  std::vector<tollgate::Limit> limits = config->limits;
  // partner_exact: partner_hot_key's numbers in exact mode, for the sync-versus-exact demo.
  for (const tollgate::Limit& limit : config->limits) {
    if (limit.name != "partner_hot_key") continue;
    tollgate::Limit exact = limit;
    exact.name = std::string(kPartnerExact);
    exact.mode = tollgate::Mode::kExact;
    // The baseline makes one Redis call per request: a deadline generous enough that a
    // loaded machine (the sanitizer build in `make test`) does not turn calls into local
    // fallback answers, which make no call and would flatter the comparison.
    exact.timeout_micros = std::max<int64_t>(exact.timeout_micros, 500'000);
    limits.push_back(std::move(exact));
  }
  // The `shares: equal` twins of partner_hot_key and partner_exact, for the skew demo.
  for (size_t i = 0, n = limits.size(); i < n; ++i) {
    if (limits[i].name != "partner_hot_key" && limits[i].name != kPartnerExact) continue;
    tollgate::Limit equal = limits[i];
    equal.name += kEqualSuffix;
    equal.shares = tollgate::Shares::kEqual;
    limits.push_back(std::move(equal));
  }
  if (options.store == "split") {
    for (tollgate::Limit& limit : limits) SplitNumbers(limit.numbers, options.servers);
  }
  // With --store redis, the stack `tollgate serve --redis` runs: Redis behind deadlines, a
  // breaker and the limits' failure policies, `mode: sync` limits in a sync store, N fixed by
  // --servers or learned from heartbeats (every quarter of a demand period at least).
  tollgate::FleetOptions fleet_options;
  fleet_options.limits = std::move(limits);
  if (options.store == "redis") {
    fleet_options.redis.url = options.redis_url;
    fleet_options.instances = options.servers;
    fleet_options.instance_id = options.name;
    fleet_options.demand_period_ms = options.demand_period_ms;
    fleet_options.heartbeat_interval_ms =
        std::min<int64_t>(fleet_options.heartbeat_interval_ms, options.demand_period_ms / 4);
  }
  absl::StatusOr<std::unique_ptr<tollgate::Fleet>> fleet =
      tollgate::Fleet::Connect(std::move(fleet_options));
  if (!fleet.ok()) {
    std::fprintf(stderr, "tiffin-app: %s\n", fleet.status().ToString().c_str());
    return 1;
  }
  for (const std::string& warning : (*fleet)->warnings()) {
    std::fprintf(stderr, "%s: redis: %s\n", options.name.c_str(), warning.c_str());
  }

  // Signals are taken by sigwait in main; every thread started below inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  asio::io_context io;
  tcp::acceptor acceptor(io);
  beast::error_code error;
  const tcp::endpoint endpoint(asio::ip::make_address_v4("127.0.0.1"),
                               static_cast<unsigned short>(options.port));
  acceptor.open(endpoint.protocol(), error);
  if (!error) acceptor.set_option(asio::socket_base::reuse_address(true), error);
  if (!error) acceptor.bind(endpoint, error);
  if (!error) acceptor.listen(asio::socket_base::max_listen_connections, error);
  if (error) {
    std::fprintf(stderr, "tiffin-app: cannot listen on 127.0.0.1:%d: %s\n", options.port,
                 error.message().c_str());
    return 1;
  }
  std::fprintf(stderr, "tiffin-app %s: 127.0.0.1:%d, store %s\n", options.name.c_str(),
               options.port, options.store.c_str());

  tollgate::Limiter& checks = (*fleet)->limiter();
  std::thread accept_thread([&] {
    for (;;) {
      tcp::socket socket(io);
      beast::error_code accept_error;
      acceptor.accept(socket, accept_error);
      if (accept_error) continue;
      std::thread(Serve, std::move(socket), std::ref(checks), std::cref(options.name)).detach();
    }
  });
  accept_thread.detach();

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  // Connection threads are detached and may be inside a check: leave without running
  // destructors under them.
  std::fflush(stderr);
  _exit(0);
}
