// Copyright tollgate authors.
#include "src/core/timer_task.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tollgate/timers.h"

namespace tollgate::internal {
namespace {

class TimerTaskTest : public ::testing::Test {
 protected:
  std::shared_ptr<SimulatedTimers> timers_ = std::make_shared<SimulatedTimers>(0);
  std::vector<int64_t> runs_;  // the timers' time of each run
};

TEST_F(TimerTaskTest, RunsAfterEachDelayItsRunAsks) {
  TimerTask task(timers_, [&](TimerTask::Next next) {
    runs_.push_back(timers_->NowMicros());
    std::move(next)(runs_.size() == 1 ? 300 : 100);
  });
  timers_->AdvanceMicros(1000);
  EXPECT_TRUE(runs_.empty());  // not started
  task.Start(50);
  timers_->AdvanceMicros(600);
  EXPECT_EQ(runs_, (std::vector<int64_t>{1050, 1350, 1450, 1550}));
  task.Stop();
  timers_->AdvanceMicros(1000);
  EXPECT_EQ(runs_.size(), 4u);
  EXPECT_EQ(timers_->pending(), 0);  // the stopped task's timer went unrun
}

// A run that waits for a reply is one run: no other starts before it ends, however much
// time passes, and the next comes its delay after it ends.
TEST_F(TimerTaskTest, ARunInProgressIsNeverOverlapped) {
  std::optional<TimerTask::Next> held;
  TimerTask task(timers_, [&](TimerTask::Next next) {
    runs_.push_back(timers_->NowMicros());
    held = std::move(next);
  });
  task.Start(10);
  timers_->AdvanceMicros(1000);
  ASSERT_EQ(runs_.size(), 1u);
  task.RunWithin(1);  // nothing to bring forward while a run is in progress
  timers_->AdvanceMicros(1000);
  EXPECT_EQ(runs_.size(), 1u);
  std::move (*held)(100);
  timers_->AdvanceMicros(100);
  EXPECT_EQ(runs_, (std::vector<int64_t>{10, 2100}));
}

TEST_F(TimerTaskTest, RunWithinBringsTheNextRunForward) {
  TimerTask task(timers_, [&](TimerTask::Next next) {
    runs_.push_back(timers_->NowMicros());
    std::move(next)(1000);
  });
  task.RunWithin(5);  // not started yet: nothing
  task.Start(1000);
  timers_->AdvanceMicros(100);
  task.RunWithin(50);
  task.RunWithin(500);  // later than what is scheduled now: no change
  timers_->AdvanceMicros(1000);
  EXPECT_EQ(runs_, (std::vector<int64_t>{150}));
}

// A run in progress when the task stops still ends (here on another thread, as a Redis reply
// does, after the task is gone), and nothing runs after it.
TEST_F(TimerTaskTest, ARunInProgressOutlivesStopAndSchedulesNothing) {
  std::optional<TimerTask::Next> held;
  auto task = std::make_unique<TimerTask>(timers_, [&](TimerTask::Next next) {
    runs_.push_back(timers_->NowMicros());
    held = std::move(next);
  });
  task->Start(1);
  timers_->AdvanceMicros(1);
  ASSERT_EQ(runs_.size(), 1u);
  task->Stop();
  task.reset();
  std::thread replier([&held] { std::move (*held)(10); });
  replier.join();
  timers_->AdvanceMicros(100);
  EXPECT_EQ(runs_.size(), 1u);
  EXPECT_EQ(timers_->pending(), 0);
}

// StopAndWait waits for the run in progress to end (here on another thread, as a Redis reply
// does): what the run uses may go once it returns.
TEST_F(TimerTaskTest, StopAndWaitWaitsForTheRunInProgress) {
  std::thread replier;
  bool ended = false;
  auto task = std::make_unique<TimerTask>(timers_, [&](TimerTask::Next next) {
    replier = std::thread([&ended, next = std::move(next)]() mutable {
      std::this_thread::yield();
      ended = true;
      std::move(next)(10);
    });
  });
  task->Start(1);
  timers_->AdvanceMicros(1);
  task->StopAndWait();
  EXPECT_TRUE(ended);
  replier.join();
  timers_->AdvanceMicros(100);
  EXPECT_EQ(timers_->pending(), 0);
}

// A run may stop its own task (a store released in its round): Stop returns at once there.
TEST_F(TimerTaskTest, ARunMayStopItsOwnTask) {
  std::unique_ptr<TimerTask> task;
  task = std::make_unique<TimerTask>(timers_, [&](TimerTask::Next next) {
    runs_.push_back(timers_->NowMicros());
    task->Stop();
    std::move(next)(10);
  });
  task->Start(1);
  timers_->AdvanceMicros(100);
  EXPECT_EQ(runs_, (std::vector<int64_t>{1}));
  EXPECT_EQ(timers_->pending(), 0);
}

TEST_F(TimerTaskTest, AStarterOutlivingItsTaskDoesNothing) {
  absl::AnyInvocable<void() &&> start;
  {
    TimerTask task(timers_, [&](TimerTask::Next next) {
      runs_.push_back(timers_->NowMicros());
      std::move(next)(1);
    });
    start = task.Starter(1);
  }
  std::move(start)();
  timers_->AdvanceMicros(10);
  EXPECT_TRUE(runs_.empty());
}

}  // namespace
}  // namespace tollgate::internal
