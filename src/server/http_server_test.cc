// Copyright tollgate authors. The server in process, on a loopback ephemeral port, with a store
// that answers only when the test says so (from the test's thread, as Redis would from its
// own): requests in flight at shutdown, and store failures.
#include "src/server/http_server.h"

#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tollgate/limiter.h"
#include "tollgate/store.h"

namespace tollgate::server {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

// Parks every check until Answer() is called.
class ParkedStore : public Store {
 public:
  void ApplyAsync(std::vector<CheckItem> items, CheckCallback done) override {
    absl::MutexLock lock(&mu_);
    parked_.push_back(std::move(done));
  }
  std::string_view Name() const override { return "parked"; }

  // Waits until a check is parked. False after 30 s.
  bool WaitParked() {
    absl::MutexLock lock(&mu_);
    auto has_parked = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !parked_.empty(); };
    return mu_.AwaitWithTimeout(absl::Condition(&has_parked), absl::Seconds(30));
  }

  // Waits for a parked check and answers it with `result` on this thread.
  bool Answer(absl::StatusOr<std::vector<Decision>> result) {
    if (!WaitParked()) return false;
    CheckCallback done;
    {
      absl::MutexLock lock(&mu_);
      done = std::move(parked_.front());
      parked_.pop_front();
    }
    std::move(done)(std::move(result));
    return true;
  }

 private:
  absl::Mutex mu_;
  std::deque<CheckCallback> parked_ ABSL_GUARDED_BY(mu_);
};

HttpServerOptions Loopback(uint16_t port, int threads) {
  HttpServerOptions options;
  options.host = "127.0.0.1";
  options.port = port;
  options.threads = threads;
  return options;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Limit limit;
    limit.name = "otp";
    limit.numbers = {.algorithm = Algorithm::kFixedWindow, .limit = 3, .window_micros = 60'000'000};
    limit.on_store_failure = FailureMode::kFailClosed;
    store_ = std::make_shared<ParkedStore>();
    auto service = CheckService::Create(
        CheckServiceOptions{[store = store_](std::vector<Limit> limits) {
                              return Limiter::Create({.limits = std::move(limits), .store = store});
                            },
                            nullptr, nullptr, 1000},
        LoadedConfigs{{limit}, {}});
    ASSERT_TRUE(service.ok()) << service.status();
    auto server =
        HttpServer::Start(Loopback(0, 2), std::shared_ptr<CheckService>(*std::move(service)));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    ASSERT_NE(server_->port(), 0);

    stream_.expires_after(std::chrono::seconds(30));
    stream_.connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), server_->port()));
  }

  void TearDown() override {
    if (server_ != nullptr) {
      server_->Shutdown();
      EXPECT_TRUE(server_->Wait(std::chrono::seconds(30)));
    }
  }

  void SendCheck() {
    http::request<http::string_body> request(http::verb::post, "/v1/check", 11);
    request.set(http::field::host, "127.0.0.1");
    request.body() = R"({"limit":"otp","key":"+4412345"})";
    request.prepare_payload();
    http::write(stream_, request);
  }

  http::response<http::string_body> Read() {
    http::response<http::string_body> response;
    http::read(stream_, buffer_, response);
    return response;
  }

  std::shared_ptr<ParkedStore> store_;
  std::unique_ptr<HttpServer> server_;
  net::io_context io_;
  beast::tcp_stream stream_{io_};
  beast::flat_buffer buffer_;
};

TEST_F(HttpServerTest, ReportsTheBoundAddress) {
  EXPECT_EQ(server_->address(), "127.0.0.1:" + std::to_string(server_->port()));
}

TEST_F(HttpServerTest, RequestInFlightAtShutdownIsAnsweredThenTheConnectionCloses) {
  SendCheck();
  // The request is in flight: read, and waiting for the store.
  ASSERT_TRUE(store_->WaitParked());
  server_->Shutdown();
  // The store answers after the shutdown began, from another thread.
  ASSERT_TRUE(store_->Answer(std::vector<Decision>{
      {.allowed = true, .limit = 3, .remaining = 2, .reset_after_micros = 1'000}}));
  http::response<http::string_body> response = Read();
  EXPECT_EQ(response.result(), http::status::ok);
  EXPECT_FALSE(response.keep_alive());
  EXPECT_TRUE(server_->Wait(std::chrono::seconds(30)));
  server_.reset();
}

TEST_F(HttpServerTest, FailClosedRefusalIs503WithRetryAfter) {
  SendCheck();
  ASSERT_TRUE(store_->Answer(std::vector<Decision>{{.allowed = false,
                                                    .limit = 3,
                                                    .source = DecisionSource::kFallback,
                                                    .reason = DenyReason::kStoreUnavailable}}));
  http::response<http::string_body> response = Read();
  EXPECT_EQ(response.result(), http::status::service_unavailable);
  EXPECT_EQ(response[http::field::retry_after], "1");
  nlohmann::json json = nlohmann::json::parse(response.body());
  EXPECT_EQ(json["allowed"], false);
  EXPECT_EQ(json["reason"], "store_unavailable");
  EXPECT_EQ(json["source"], "fallback");
}

TEST_F(HttpServerTest, StoreErrorIs503WithAnError) {
  SendCheck();
  ASSERT_TRUE(store_->Answer(absl::UnavailableError("redis: connection refused")));
  http::response<http::string_body> response = Read();
  EXPECT_EQ(response.result(), http::status::service_unavailable);
  EXPECT_EQ(nlohmann::json::parse(response.body())["error"], "redis: connection refused");
  EXPECT_TRUE(response.keep_alive());
}

TEST(HttpServerStartTest, AnAddressInUseIsUnavailable) {
  auto service = CheckService::Create(CheckServiceOptions(), LoadedConfigs());
  ASSERT_TRUE(service.ok());
  std::shared_ptr<CheckService> shared(*std::move(service));
  auto first = HttpServer::Start(Loopback(0, 1), shared);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = HttpServer::Start(Loopback((*first)->port(), 1), shared);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace tollgate::server
