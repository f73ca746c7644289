// Copyright tollgate authors. tiffin-envoys: simulated Envoys of the Rate Limit Quota Service
// (tests/support/rlqs_envoy.h: what Envoy's rate_limit_quota filter does, over real gRPC),
// each its own StreamRateLimitQuotas stream to one of the `tollgate serve` instances given,
// in turn, each deciding its own traffic locally under the assignments it gets.
//
//   tiffin-envoys --servers 127.0.0.1:8081,127.0.0.1:8091 --envoys 4 --rate 800
//                 --duration-s 10 [--bucket name=menu] [--domain tiffin]
//                 [--interval-ms 1000] [--summary-out FILE]
//
// The Envoys share `--rate` requests per second of one bucket evenly, for `--duration-s`
// seconds from the next whole wall-clock second. Each request counts in the wall-clock second
// its Envoy decided it in: for a limit of 1 s fixed windows (Redis' clock is this host's), the
// limit's windows. Prints one CSV row per second, in tiffin-load's columns (demo/loadgen.cc):
//   second,offered,allowed,refused,unavailable,errors,tokens
// refused is what an Envoy denied itself; tokens is what the server granted that second (new
// token buckets, summed). With --summary-out, writes one row of
//   envoys,streams,assignments,bound
// where bound is the sum over the Envoys of the largest token bucket each was ever granted:
// what the fleet may admit in a window beyond the limit (docs/envoy.md, the overshoot bound).
// No assignment yet means deny (Envoy's no_assignment_behavior DENY_ALL).
#include <sys/time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "tests/support/rlqs_envoy.h"

namespace {

using tollgate::testing::RlqsBucket;
using tollgate::testing::SimulatedEnvoy;

struct Options {
  std::vector<int> ports;
  int envoys = 4;
  double rate = 800;
  double duration_s = 10;
  RlqsBucket bucket = {{"name", "menu"}};
  std::string domain = "tiffin";
  int interval_ms = 1000;
  std::string summary_out;
};

struct Second {
  int64_t offered = 0;
  int64_t allowed = 0;
  int64_t refused = 0;
  int64_t granted = 0;
};

int64_t WallMicros() {
  timeval now{};
  gettimeofday(&now, nullptr);
  return static_cast<int64_t>(now.tv_sec) * 1'000'000 + now.tv_usec;
}

bool Parse(int argc, char** argv, Options& options) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    bool ok = true;
    if (flag == "--servers") {
      const std::vector<std::string> servers = absl::StrSplit(value, ',');
      for (const std::string& server : servers) {
        int port = 0;
        const size_t colon = server.rfind(':');
        if (colon == std::string::npos || server.substr(0, colon) != "127.0.0.1" ||
            !absl::SimpleAtoi(server.substr(colon + 1), &port)) {
          ok = false;
        }
        options.ports.push_back(port);
      }
    } else if (flag == "--envoys") {
      ok = absl::SimpleAtoi(value, &options.envoys) && options.envoys >= 1;
    } else if (flag == "--rate") {
      ok = absl::SimpleAtod(value, &options.rate) && options.rate > 0;
    } else if (flag == "--duration-s") {
      ok = absl::SimpleAtod(value, &options.duration_s) && options.duration_s > 0;
    } else if (flag == "--bucket") {
      options.bucket.clear();
      const std::vector<std::string> pairs = absl::StrSplit(value, ',');
      for (const std::string& pair : pairs) {
        const std::vector<std::string> parts = absl::StrSplit(pair, absl::MaxSplits('=', 1));
        ok = ok && parts.size() == 2 && !parts[0].empty();
        if (ok) options.bucket[parts[0]] = parts[1];
      }
    } else if (flag == "--domain") {
      options.domain = value;
    } else if (flag == "--interval-ms") {
      ok = absl::SimpleAtoi(value, &options.interval_ms) && options.interval_ms >= 1;
    } else if (flag == "--summary-out") {
      options.summary_out = value;
    } else {
      std::fprintf(stderr, "tiffin-envoys: unknown flag %s\n", flag.c_str());
      return false;
    }
    if (!ok) {
      std::fprintf(stderr, "tiffin-envoys: bad value for %s: %s\n", flag.c_str(), value.c_str());
      return false;
    }
  }
  return !options.ports.empty();
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (argc % 2 == 0 || !Parse(argc, argv, options)) {
    std::fprintf(stderr,
                 "usage: tiffin-envoys --servers 127.0.0.1:PORT[,...] [--envoys N] "
                 "[--rate PER_SECOND] [--duration-s SECONDS] [--bucket k=v[,k=v]] "
                 "[--domain D] [--interval-ms MS] [--summary-out FILE]\n");
    return 2;
  }
  std::vector<std::unique_ptr<SimulatedEnvoy>> envoys;
  for (int i = 0; i < options.envoys; ++i) {
    envoys.push_back(std::make_unique<SimulatedEnvoy>(
        options.ports[i % options.ports.size()],
        tollgate::testing::SimulatedEnvoyOptions{
            .domain = options.domain,
            .reporting_interval = std::chrono::milliseconds(options.interval_ms),
            .no_assignment_allows = false}));
  }
  const int seconds = static_cast<int>(std::ceil(options.duration_s));
  std::vector<Second> rows(static_cast<size_t>(seconds));
  // From the next whole second, so that rows are the limit's 1 s windows.
  std::this_thread::sleep_for(std::chrono::microseconds(1'000'000 - WallMicros() % 1'000'000));
  const int64_t start_us = WallMicros() - WallMicros() % 1'000'000;
  const auto start = std::chrono::steady_clock::now();
  const double per_envoy = options.rate / options.envoys;
  std::vector<int64_t> sent(envoys.size(), 0);
  for (;;) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (elapsed >= options.duration_s) break;
    for (size_t i = 0; i < envoys.size(); ++i) {
      const auto due = static_cast<int64_t>(elapsed * per_envoy);
      for (; sent[i] < due; ++sent[i]) {
        const bool allowed = envoys[i]->Request(options.bucket);
        const int64_t row = (WallMicros() - start_us) / 1'000'000;
        Second& second = rows[static_cast<size_t>(std::clamp<int64_t>(row, 0, seconds - 1))];
        ++second.offered;
        ++(allowed ? second.allowed : second.refused);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  int64_t streams = 0, assignments = 0, bound = 0;
  for (const auto& envoy : envoys) {
    const tollgate::testing::RlqsBucketCounts counts = envoy->counts(options.bucket);
    streams += envoy->streams_opened();
    assignments += counts.assignments;
    bound += counts.max_tokens_seen;
    for (const tollgate::testing::RlqsGrant& grant : counts.grants) {
      const int64_t at_us =
          std::chrono::duration_cast<std::chrono::microseconds>(grant.at.time_since_epoch())
              .count();
      const int64_t row = (at_us - start_us) / 1'000'000;
      if (row >= 0 && row < seconds) rows[static_cast<size_t>(row)].granted += grant.tokens;
    }
  }
  for (auto& envoy : envoys) envoy->Stop();

  std::printf("second,offered,allowed,refused,unavailable,errors,tokens\n");
  for (int s = 0; s < seconds; ++s) {
    const Second& row = rows[static_cast<size_t>(s)];
    std::printf("%d,%lld,%lld,%lld,0,0,%lld\n", s, static_cast<long long>(row.offered),
                static_cast<long long>(row.allowed), static_cast<long long>(row.refused),
                static_cast<long long>(row.granted));
  }
  if (!options.summary_out.empty()) {
    FILE* out = std::fopen(options.summary_out.c_str(), "w");
    if (out == nullptr) {
      std::fprintf(stderr, "tiffin-envoys: cannot write %s\n", options.summary_out.c_str());
      return 1;
    }
    std::fprintf(out, "envoys,streams,assignments,bound\n%d,%lld,%lld,%lld\n", options.envoys,
                 static_cast<long long>(streams), static_cast<long long>(assignments),
                 static_cast<long long>(bound));
    std::fclose(out);
  }
  return 0;
}
