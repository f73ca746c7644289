// Copyright tollgate authors. Load for the Rate Limit Quota Service (bench/rlqs_bench.sh): E
// Envoys, each its own StreamRateLimitQuotas stream (grpc++), each reporting B buckets every
// interval, with random phases. Each bucket reports as admitted what its last token_bucket
// assignment granted (it spends it all) and a few denied requests. Prints, for the run after
// a warm-up, one line of key=value: the bucket reports sent and assignments received per
// second, the server's Redis calls per second (tollgate_rlqs_redis_commands_total from its
// /metrics) and its CPU seconds per report (utime + stime of --server-pid), and the streams
// that ended early.
//
//   rlqs_load --target 127.0.0.1:8081 --metrics 127.0.0.1:8080 --server-pid PID --envoys 100
//             --buckets 100 --interval-ms 1000 --warmup-s 3 --seconds 20 --domain bench
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "bench/process_cpu.h"
#include "envoy/service/rate_limit_quota/v3/rlqs.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace {

namespace rlqs = envoy::service::rate_limit_quota::v3;

struct Options {
  std::string target = "127.0.0.1:8081";
  std::string domain = "bench";
  int envoys = 100;
  int buckets = 100;
  int interval_ms = 1000;
  int warmup_s = 3;
  int seconds = 20;
  int channels = 10;                       // connections the streams share
  std::string metrics = "127.0.0.1:8080";  // the server's HTTP port
  int server_pid = 0;
};

// tollgate_rlqs_redis_commands_total from GET /metrics at `address` (HOST:PORT); -1 on failure.
double RedisCommands(const std::string& address) {
  const size_t colon = address.rfind(':');
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(std::atoi(address.substr(colon + 1).c_str())));
  if (inet_pton(AF_INET, address.substr(0, colon).c_str(), &to.sin_addr) != 1) return -1;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  std::string text;
  if (connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0) {
    const std::string request = "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n";
    if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buffer[65536];
      ssize_t n;
      while ((n = read(fd, buffer, sizeof(buffer))) > 0)
        text.append(buffer, static_cast<size_t>(n));
    }
  }
  close(fd);
  const std::string name = "\ntollgate_rlqs_redis_commands_total ";
  const size_t at = text.find(name);
  return at == std::string::npos ? -1 : std::atof(text.c_str() + at + name.size());
}

std::atomic<int64_t> g_reports{0};      // bucket usage reports sent, after the warm-up
std::atomic<int64_t> g_assignments{0};  // bucket actions received, after the warm-up
std::atomic<int64_t> g_ended{0};        // streams that ended before the run did
std::atomic<bool> g_counting{false};
std::atomic<bool> g_stop{false};

// One Envoy: a stream, its reports on this thread, its assignments on a reader.
void RunEnvoy(const Options& options, const std::shared_ptr<grpc::Channel>& channel, int index) {
  auto stub = rlqs::RateLimitQuotaService::NewStub(channel);
  grpc::ClientContext context;
  std::unique_ptr<
      grpc::ClientReaderWriter<rlqs::RateLimitQuotaUsageReports, rlqs::RateLimitQuotaResponse>>
      stream = stub->StreamRateLimitQuotas(&context);
  absl::Mutex mu;
  std::map<std::string, uint32_t> granted;  // by user value: the last grant
  std::thread reader([&] {
    rlqs::RateLimitQuotaResponse response;
    while (stream->Read(&response)) {
      if (g_counting.load(std::memory_order_relaxed)) {
        g_assignments.fetch_add(response.bucket_action_size(), std::memory_order_relaxed);
      }
      absl::MutexLock lock(&mu);
      for (const auto& action : response.bucket_action()) {
        auto it = action.bucket_id().bucket().find("user");
        if (it == action.bucket_id().bucket().end()) continue;
        const auto& strategy = action.quota_assignment_action().rate_limit_strategy();
        granted[it->second] =
            strategy.has_token_bucket() ? strategy.token_bucket().max_tokens() : 0;
      }
    }
    if (!g_stop.load()) g_ended.fetch_add(1);
  });
  std::mt19937 random(static_cast<uint32_t>(index));
  std::this_thread::sleep_for(std::chrono::milliseconds(
      std::uniform_int_distribution<int>(0, options.interval_ms)(random)));
  auto next = std::chrono::steady_clock::now();
  bool first = true;
  while (!g_stop.load(std::memory_order_relaxed)) {
    rlqs::RateLimitQuotaUsageReports reports;
    reports.set_domain(options.domain);
    {
      absl::MutexLock lock(&mu);
      for (int b = 0; b < options.buckets; ++b) {
        const std::string user = "u" + std::to_string(b);
        auto* usage = reports.add_bucket_quota_usages();
        (*usage->mutable_bucket_id()->mutable_bucket())["name"] = "api";
        (*usage->mutable_bucket_id()->mutable_bucket())["user"] = user;
        usage->set_num_requests_allowed(first ? 1 : granted[user]);
        usage->set_num_requests_denied(5);
        usage->mutable_time_elapsed()->set_seconds(first ? 0 : options.interval_ms / 1000);
      }
    }
    first = false;
    if (!stream->Write(reports)) break;
    if (g_counting.load(std::memory_order_relaxed)) {
      g_reports.fetch_add(options.buckets, std::memory_order_relaxed);
    }
    next += std::chrono::milliseconds(options.interval_ms);
    std::this_thread::sleep_until(next);
  }
  context.TryCancel();
  reader.join();
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  const std::map<std::string, std::string*> strings = {{"--target", &options.target},
                                                       {"--domain", &options.domain},
                                                       {"--metrics", &options.metrics}};
  const std::map<std::string, int*> numbers = {
      {"--envoys", &options.envoys},           {"--buckets", &options.buckets},
      {"--interval-ms", &options.interval_ms}, {"--warmup-s", &options.warmup_s},
      {"--seconds", &options.seconds},         {"--channels", &options.channels},
      {"--server-pid", &options.server_pid}};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (auto it = strings.find(flag); it != strings.end()) {
      *it->second = argv[i + 1];
    } else if (auto number = numbers.find(flag); number != numbers.end()) {
      *number->second = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < options.channels; ++i) {
    grpc::ChannelArguments arguments;
    arguments.SetInt("grpc.use_local_subchannel_pool", 1);  // a connection of its own
    channels.push_back(
        grpc::CreateCustomChannel(options.target, grpc::InsecureChannelCredentials(), arguments));
  }
  std::vector<std::thread> envoys;
  for (int i = 0; i < options.envoys; ++i) {
    envoys.emplace_back(RunEnvoy, std::cref(options), channels[i % channels.size()], i);
  }
  std::this_thread::sleep_for(std::chrono::seconds(options.warmup_s));
  const double cpu_before = tollgate::bench::ProcessCpuSeconds(options.server_pid);
  const double redis_before = RedisCommands(options.metrics);
  g_counting.store(true);
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(options.seconds));
  g_counting.store(false);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu = tollgate::bench::ProcessCpuSeconds(options.server_pid) - cpu_before;
  const double redis = RedisCommands(options.metrics) - redis_before;
  g_stop.store(true);
  for (std::thread& envoy : envoys) envoy.join();
  const double reports = static_cast<double>(g_reports.load());
  std::printf(
      "reports_per_second=%.1f assignments_per_second=%.1f redis_calls_per_second=%.2f "
      "server_cpu_us_per_report=%.2f server_cpu_share=%.3f streams_ended=%lld\n",
      reports / elapsed, static_cast<double>(g_assignments.load()) / elapsed, redis / elapsed,
      reports > 0 ? cpu * 1e6 / reports : -1, cpu / elapsed,
      static_cast<long long>(g_ended.load()));
  return g_ended.load() == 0 ? 0 : 1;
}
