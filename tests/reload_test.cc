// Copyright tollgate authors. `tollgate serve` reloading its config (SIGHUP, file change)
// under load, end to end: a real process on a loopback port.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "boost/beast/http.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/process.h"
#include "tests/support/serve_process.h"

namespace tollgate {
namespace {

namespace http = boost::beast::http;
using ::tollgate::testing::HttpTestClient;
using ::tollgate::testing::ServeProcess;

// `orders` counts per hour, so no test sees its window end; `steady` carries the load.
constexpr char kConfigTemplate[] = R"(limits:
  orders:
    algorithm: fixed_window
    limit: LIMIT
    window: 1h
  steady:
    algorithm: token_bucket
    capacity: 1000000
    refill_per_second: 1000000
)";

std::string Config(int orders_limit) {
  return absl::StrReplaceAll(kConfigTemplate, {{"LIMIT", absl::StrCat(orders_limit)}});
}

// Replaces the file in one step (write a sibling, rename), as editors and config management
// do, so the server never reads half a file.
void ReplaceFile(const std::string& path, const std::string& contents) {
  const std::string temporary = path + ".new";
  testing::WriteFile(temporary, contents);
  ASSERT_EQ(std::rename(temporary.c_str(), path.c_str()), 0);
}

size_t Count(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++count;
  }
  return count;
}

// Waits until the server's log holds `needle` more than `seen` times.
bool WaitForLog(const ServeProcess& server, const std::string& needle, size_t seen) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    if (Count(server.log(), needle) > seen) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// The statuses of `n` checks of `orders` for `key`, as "200 200 429 ...".
std::string OrdersCodes(HttpTestClient& client, const std::string& key, int n) {
  std::string codes;
  for (int i = 0; i < n; ++i) {
    auto response = client.Check(absl::StrCat(R"({"limit":"orders","key":")", key, R"("})"));
    absl::StrAppend(&codes, i == 0 ? "" : " ", response ? response->result_int() : -1);
  }
  return codes;
}

TEST(ServeReloadTest, ReloadsUnderLoadWithoutFailingARequestAndRefusesAnInvalidConfig) {
  auto server = ServeProcess::Start(Config(3));
  ASSERT_NE(server, nullptr);

  // A client thread checks `steady` all along; every answer must be a 200.
  std::atomic<bool> stop{false};
  std::atomic<int> answered{0}, failed{0};
  std::thread load([&] {
    HttpTestClient client(server->port());
    while (!stop.load()) {
      auto response = client.Check(R"({"limit":"steady","key":"load"})");
      if (response.has_value() && response->result_int() == 200) {
        ++answered;
      } else {
        ++failed;
      }
    }
  });

  // Requests are in flight before, during and after each reload.
  auto wait_for_more_load = [&] {
    const int target = answered.load() + 20;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (answered.load() < target && failed.load() == 0 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  };
  wait_for_more_load();

  HttpTestClient client(server->port());
  EXPECT_EQ(OrdersCodes(client, "user:1", 4), "200 200 200 429");

  // A valid config: the limit goes from 3 to 6. The counters carry on in the store.
  size_t reloaded = Count(server->log(), "config reloaded");
  ReplaceFile(server->config_path(), Config(6));
  server->Signal(SIGHUP);
  ASSERT_TRUE(WaitForLog(*server, "config reloaded", reloaded)) << server->log();
  wait_for_more_load();
  EXPECT_EQ(OrdersCodes(client, "user:1", 4), "200 200 200 429");
  EXPECT_EQ(OrdersCodes(client, "user:2", 7), "200 200 200 200 200 200 429");

  // An invalid config: refused and logged; the limit of 6 still applies.
  size_t refused = Count(server->log(), "refused, the old config keeps serving");
  ReplaceFile(server->config_path(), "limits:\n  orders:\n    algorithm: fixed_window\n");
  server->Signal(SIGHUP);
  ASSERT_TRUE(WaitForLog(*server, "refused, the old config keeps serving", refused))
      << server->log();
  wait_for_more_load();
  EXPECT_EQ(OrdersCodes(client, "user:3", 7), "200 200 200 200 200 200 429");

  stop = true;
  load.join();
  EXPECT_GE(answered.load(), 60);
  EXPECT_EQ(failed.load(), 0);
  auto metrics = client.Send(http::verb::get, "/metrics");
  ASSERT_TRUE(metrics.has_value());
  EXPECT_THAT(metrics->body(), ::testing::ContainsRegex(
                                   R"(tollgate_config_reloads_total\{result="success"\} [1-9])"));
  EXPECT_THAT(metrics->body(), ::testing::ContainsRegex(
                                   R"(tollgate_config_reloads_total\{result="failure"\} [1-9])"));
  EXPECT_EQ(server->Stop(), 0) << server->log();
}

// Without a signal: the server notices the file changed (it looks every second).
TEST(ServeReloadTest, ReloadsWhenTheFileChanges) {
  auto server = ServeProcess::Start(Config(1));
  ASSERT_NE(server, nullptr);
  HttpTestClient client(server->port());
  EXPECT_EQ(OrdersCodes(client, "user:1", 2), "200 429");
  size_t reloaded = Count(server->log(), "config reloaded");
  ReplaceFile(server->config_path(), Config(2));
  ASSERT_TRUE(WaitForLog(*server, "config reloaded", reloaded)) << server->log();
  EXPECT_EQ(OrdersCodes(client, "user:1", 2), "200 429");
  EXPECT_EQ(server->Stop(), 0) << server->log();
}

}  // namespace
}  // namespace tollgate
