// Copyright tollgate authors. When a router re-reads its topology (the cluster's slot map,
// Sentinel's primary): on request, at most once per min_refresh_interval, one at a time, and
// every refresh_interval.
#ifndef TOLLGATE_SRC_STORE_REDIS_REFRESH_SCHEDULER_H_
#define TOLLGATE_SRC_STORE_REDIS_REFRESH_SCHEDULER_H_

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "src/store/redis/router.h"

namespace tollgate::redis {

// Everything but Request() runs on the router's I/O thread.
class RefreshScheduler {
 public:
  // `refresh` starts one refresh and must end it, later or at once, with Finish().
  RefreshScheduler(boost::asio::io_context& io, const RouterOptions& options,
                   absl::AnyInvocable<void()> refresh)
      : io_(io),
        refresh_interval_(options.refresh_interval),
        min_refresh_interval_(options.min_refresh_interval),
        refresh_(std::move(refresh)),
        refresh_timer_(io),
        periodic_timer_(io) {}

  // A refresh soon (at most one per min_refresh_interval). Any thread.
  void Request() {
    if (requested_.exchange(true)) return;
    boost::asio::post(io_, [this] { Schedule(); });
  }

  // The first refresh, at once; `done` gets its result.
  void RefreshNow(absl::AnyInvocable<void(absl::Status) &&> done) {
    on_done_ = std::move(done);
    Begin();
  }

  // Refreshes every refresh_interval from now on.
  void ArmPeriodic() {
    if (stopped_) return;
    periodic_timer_.expires_after(refresh_interval_);
    periodic_timer_.async_wait([this](const boost::system::error_code& error) {
      if (error || stopped_) return;
      requested_.store(true);
      Schedule();
      ArmPeriodic();
    });
  }

  // Ends the refresh in progress; a refresh requested meanwhile is scheduled.
  void Finish(absl::Status status) {
    refreshing_ = false;
    if (on_done_) {
      auto done = std::move(on_done_);
      on_done_ = nullptr;
      std::move(done)(std::move(status));
    }
    if (requested_.load()) Schedule();
  }

  // No refresh starts after this.
  void Stop() {
    stopped_ = true;
    refresh_timer_.cancel();
    periodic_timer_.cancel();
  }

 private:
  using SteadyClock = std::chrono::steady_clock;

  void Schedule() {
    if (refreshing_ || stopped_ || refresh_timer_armed_) return;
    const auto wait = last_refresh_ + min_refresh_interval_ - SteadyClock::now();
    if (wait <= SteadyClock::duration::zero()) {
      Begin();
      return;
    }
    refresh_timer_armed_ = true;
    refresh_timer_.expires_after(wait);
    refresh_timer_.async_wait([this](const boost::system::error_code& error) {
      refresh_timer_armed_ = false;
      if (!error && !stopped_) Begin();
    });
  }

  void Begin() {
    refreshing_ = true;
    requested_.store(false);
    last_refresh_ = SteadyClock::now();
    refresh_();
  }

  boost::asio::io_context& io_;
  const std::chrono::milliseconds refresh_interval_;
  const std::chrono::milliseconds min_refresh_interval_;
  absl::AnyInvocable<void()> refresh_;
  std::atomic<bool> requested_{false};
  boost::asio::steady_timer refresh_timer_;
  boost::asio::steady_timer periodic_timer_;
  bool refresh_timer_armed_ = false;
  bool refreshing_ = false;
  bool stopped_ = false;
  SteadyClock::time_point last_refresh_{};
  absl::AnyInvocable<void(absl::Status) &&> on_done_;
};

}  // namespace tollgate::redis

#endif  // TOLLGATE_SRC_STORE_REDIS_REFRESH_SCHEDULER_H_
