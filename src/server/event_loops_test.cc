// Copyright tollgate authors.
#include "src/server/event_loops.h"

#include <set>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "boost/asio/connect.hpp"
#include "boost/asio/post.hpp"
#include "gtest/gtest.h"

namespace tollgate::server {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;

TEST(EventLoopsTest, RefusesANegativeCount) {
  EXPECT_EQ(EventLoops::Start(-1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(EventLoopsTest, EachLoopRunsOnItsOwnThreadAndKnowsItsIndex) {
  auto loops = EventLoops::Start(2);
  ASSERT_TRUE(loops.ok());
  ASSERT_EQ((*loops)->size(), 2);
  EXPECT_EQ(EventLoops::CurrentIndex(), -1);
  absl::Mutex mu;
  std::vector<int> seen;
  for (int i = 0; i < 2; ++i) {
    net::post((*loops)->loop(i), [&, i] {
      absl::MutexLock lock(&mu);
      seen.push_back(EventLoops::CurrentIndex() == i ? i : -1);
    });
  }
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(
      +[](std::vector<int>* s) { return s->size() == 2; }, &seen));
  EXPECT_EQ(std::set<int>(seen.begin(), seen.end()), (std::set<int>{0, 1}));
}

TEST(ListenerTest, SpreadsConnectionsOverTheLoopsAndStopsAccepting) {
  auto loops = EventLoops::Start(2);
  ASSERT_TRUE(loops.ok());
  absl::Mutex mu;
  std::vector<int> accepted_on;
  std::vector<tcp::socket> kept;
  auto listener = Listener::Start(**loops, {"127.0.0.1", 0}, [&](tcp::socket socket) {
    absl::MutexLock lock(&mu);
    accepted_on.push_back(EventLoops::CurrentIndex());
    kept.push_back(std::move(socket));
  });
  ASSERT_TRUE(listener.ok()) << listener.status();
  ASSERT_NE((*listener)->port(), 0);

  net::io_context client_io;
  std::vector<tcp::socket> clients;
  for (int i = 0; i < 4; ++i) {
    clients.emplace_back(client_io);
    clients.back().connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), (*listener)->port()));
  }
  {
    absl::MutexLock lock(&mu);
    ASSERT_TRUE(
        mu.AwaitWithTimeout(absl::Condition(
                                +[](std::vector<int>* a) { return a->size() == 4; }, &accepted_on),
                            absl::Seconds(10)));
    EXPECT_EQ(std::count(accepted_on.begin(), accepted_on.end(), 0), 2);
    EXPECT_EQ(std::count(accepted_on.begin(), accepted_on.end(), 1), 2);
  }

  (*listener)->Stop();
  // Once the close has run on the listener's loop, a new connection is refused.
  boost::system::error_code error;
  for (int attempt = 0; attempt < 100; ++attempt) {
    tcp::socket late(client_io);
    late.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), (*listener)->port()), error);
    if (error) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(error) << "still accepting after Stop()";
  absl::MutexLock lock(&mu);
  EXPECT_EQ(accepted_on.size(), 4u);
  (*loops)->Stop();
  (*loops)->Join();
  kept.clear();
}

TEST(ListenerTest, NamesTheAddressItCannotBind) {
  auto loops = EventLoops::Start(1);
  ASSERT_TRUE(loops.ok());
  auto first = Listener::Start(**loops, {"127.0.0.1", 0}, [](tcp::socket) {});
  ASSERT_TRUE(first.ok());
  auto second = Listener::Start(**loops, {"127.0.0.1", (*first)->port()}, [](tcp::socket) {});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find((*first)->address()), std::string::npos)
      << second.status();
}

}  // namespace
}  // namespace tollgate::server
