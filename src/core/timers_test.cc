// Copyright tollgate authors. Every implementation of Timers (tollgate/timers.h): the thread,
// the event loops and simulated time.
#include "tollgate/timers.h"

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/post.hpp"
#include "gtest/gtest.h"

namespace tollgate {
namespace {

// Every implementation of Timers keeps the same contract; `advance` lets `micros` pass.
void ExpectDeadlineOrderAndDestructionRuns(std::shared_ptr<Timers> timers,
                                           const std::function<void(int64_t)>& advance) {
  std::vector<int> order;
  std::mutex mutex;
  absl::Notification second_ran;
  auto record = [&](int value) {
    std::lock_guard<std::mutex> lock(mutex);
    order.push_back(value);
  };
  std::atomic<bool> cancelled{false};
  timers->RunAfter(20'000, nullptr, [&] {
    record(2);
    second_ran.Notify();
  });
  timers->RunAfter(1'000, nullptr, [&] { record(1); });
  timers->RunAfter(5'000, &cancelled, [&] { record(-1); });
  cancelled.store(true);
  advance(20'000);
  second_ran.WaitForNotification();
  timers->RunAfter(60'000'000, nullptr, [&] { record(3); });  // far away: at destruction
  timers->RunAfter(60'000'000, &cancelled, [&] { record(-1); });
  timers.reset();
  std::lock_guard<std::mutex> lock(mutex);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

TEST(TimersTest, ThreadTimersRunInDeadlineOrderAndPendingOnesAtDestruction) {
  ExpectDeadlineOrderAndDestructionRuns(ThreadTimers(), [](int64_t) {});
}

TEST(TimersTest, SimulatedTimersRunOnlyWhenTimeIsAdvanced) {
  auto timers = std::make_shared<SimulatedTimers>();
  SimulatedTimers* raw = timers.get();
  ExpectDeadlineOrderAndDestructionRuns(std::move(timers),
                                        [raw](int64_t micros) { raw->AdvanceMicros(micros); });

  SimulatedTimers simulated(0);
  int64_t seen = -1;
  simulated.RunAfter(300, nullptr, [&] { seen = simulated.NowMicros(); });
  simulated.AdvanceMicros(299);
  EXPECT_EQ(seen, -1);
  simulated.AdvanceMicros(1'000);
  EXPECT_EQ(seen, 300);  // a callback sees its own deadline as now
  EXPECT_EQ(simulated.NowMicros(), 1'299);
}

// On an event loop, a callback scheduled from the loop's thread runs on that thread; one
// scheduled from elsewhere runs too (on a thread of its own).
TEST(TimersTest, LoopTimersRunOnTheLoopThatScheduled) {
  boost::asio::io_context io;
  auto work = boost::asio::make_work_guard(io);
  std::thread loop_thread([&] { io.run(); });
  std::shared_ptr<Timers> timers = LoopTimers({&io});
  absl::Notification ran_on_loop;
  absl::Notification ran_off_loop;
  std::thread::id ran_on;
  std::atomic<bool> cancelled{false};
  std::atomic<int> cancelled_runs{0};
  boost::asio::post(io, [&] {
    timers->RunAfter(5'000, &cancelled, [&] { cancelled_runs.fetch_add(1); });
    cancelled.store(true);
    timers->RunAfter(10'000, nullptr, [&] {
      ran_on = std::this_thread::get_id();
      ran_on_loop.Notify();
    });
  });
  timers->RunAfter(1'000, nullptr, [&] { ran_off_loop.Notify(); });
  ran_on_loop.WaitForNotification();
  ran_off_loop.WaitForNotification();
  EXPECT_EQ(ran_on, loop_thread.get_id());
  EXPECT_EQ(cancelled_runs.load(), 0);

  // Destroying the timers runs what is pending on its loop at once.
  absl::Notification flushed;
  boost::asio::post(io, [&] { timers->RunAfter(60'000'000, nullptr, [&] { flushed.Notify(); }); });
  absl::Notification posted;
  boost::asio::post(io, [&] { posted.Notify(); });
  posted.WaitForNotification();
  timers.reset();
  flushed.WaitForNotification();
  work.reset();
  loop_thread.join();
}

}  // namespace
}  // namespace tollgate
