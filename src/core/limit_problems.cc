// Copyright tollgate authors.
#include "src/core/limit_problems.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/core/absl_view.h"

namespace tollgate {
namespace internal {
namespace {

constexpr int64_t kMillisecond = 1'000;
constexpr int64_t kSecond = 1'000'000;
constexpr int64_t kDay = 86'400 * kSecond;

std::string Quoted(const auto& value) { return absl::StrCat("'", value, "'"); }

// `numbers`' problems; `prefix` is "" for the limit's own numbers, "local." for its local ones.
void NumbersProblems(const LimitNumbers& numbers, std::string_view prefix,
                     std::vector<LimitProblem>& problems) {
  const auto add = [&](std::string_view field, std::string expected, std::string got) {
    problems.push_back({absl::StrCat(AbslView(prefix), AbslView(field)), std::move(expected),
                        std::move(got), /*got_is_value=*/true});
  };
  const auto count = [&](std::string_view field, int64_t value) {
    if (value < 1 || value > kMaxLimitCount) {
      add(field, absl::StrCat("expected a whole number from 1 to ", kMaxLimitCount), Quoted(value));
    }
  };
  switch (numbers.algorithm) {
    case Algorithm::kTokenBucket: {
      count("capacity", numbers.capacity);
      const double rate = numbers.refill_per_second;
      if (!std::isfinite(rate) || rate <= 0) {
        add("refill_per_second", "expected a positive number of tokens per second such as 5 or 0.5",
            Quoted(rate));
      } else if (rate > kMaxRefillPerSecond) {
        add("refill_per_second",
            absl::StrCat("expected at most ", kMaxRefillPerSecond, " tokens per second"),
            Quoted(rate));
      } else if (numbers.capacity >= 1 &&
                 static_cast<double>(numbers.capacity) / rate * kSecond > kMaxFillMicros) {
        const double fill_seconds = static_cast<double>(kMaxFillMicros) / kSecond;
        add("refill_per_second",
            absl::StrCat("expected a rate that refills the bucket within 365d (at least ",
                         static_cast<double>(numbers.capacity) / fill_seconds,
                         " per second for capacity ", numbers.capacity,
                         "; use a window for slower limits)"),
            Quoted(rate));
      }
      return;
    }
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingWindow:
    case Algorithm::kConcurrency: {
      count("limit", numbers.limit);
      const bool concurrency = numbers.algorithm == Algorithm::kConcurrency;
      if (numbers.window_micros < 1) {
        add(concurrency ? "lease" : "window", "expected a positive duration",
            Quoted(FormatDuration(numbers.window_micros)));
      }
      return;
    }
  }
  add("algorithm", "expected one of token_bucket, fixed_window, sliding_window, concurrency",
      Quoted(static_cast<int>(numbers.algorithm)));
}

// The rules of `on_store_failure: local`: local numbers present (only then), of the limit's
// own kind (slots for slots, a rate for a rate), and valid.
void LocalProblems(const Limit& limit, std::vector<LimitProblem>& problems) {
  if (limit.on_store_failure != FailureMode::kLocal) {
    if (limit.local.has_value()) {
      problems.push_back(
          {"local", "only allowed with on_store_failure: local",
           absl::StrCat("on_store_failure: ", AbslView(FailureModeName(limit.on_store_failure))),
           /*got_is_value=*/false});
    }
    return;
  }
  if (!limit.local.has_value()) {
    problems.push_back({"local",
                        "required with on_store_failure: local (the strict local limit's "
                        "algorithm and numbers), missing",
                        "", /*got_is_value=*/false});
    return;
  }
  const bool concurrency = limit.numbers.algorithm == Algorithm::kConcurrency;
  if ((limit.local->algorithm == Algorithm::kConcurrency) != concurrency) {
    problems.push_back(
        {"local.algorithm",
         concurrency ? "a concurrency limit's local limit holds leases too: expected concurrency"
                     : "a rate limit's local limit is a rate too: expected one of "
                       "token_bucket, fixed_window, sliding_window",
         std::string(AlgorithmName(limit.local->algorithm)), /*got_is_value=*/false});
    return;
  }
  NumbersProblems(*limit.local, "local.", problems);
}

// The rules of `mode: sync`: local counts per window, synced on an interval.
void SyncProblems(const Limit& limit, std::vector<LimitProblem>& problems) {
  if (limit.mode != Mode::kSync) return;
  const Algorithm algorithm = limit.numbers.algorithm;
  if (algorithm == Algorithm::kConcurrency) {
    problems.push_back({"mode",
                        "a concurrency limit's leases are taken and released in one atomic "
                        "store step, which sync mode's local counts cannot give: expected mode: "
                        "exact",
                        "'sync'"});
  } else if (algorithm == Algorithm::kTokenBucket) {
    problems.push_back({"mode",
                        "sync mode counts requests per window and supports fixed_window and "
                        "sliding_window only",
                        "mode 'sync' with algorithm token_bucket", /*got_is_value=*/false});
  }
  if (limit.durable.value_or(false)) {
    // A sync limit's counts reach Redis between syncs, after the answers they made: no WAIT
    // can hold an answer until a replica has them.
    problems.push_back({"durable",
                        "sync mode answers from local counts and sends them to Redis later, so "
                        "no answer can wait for a replica: expected mode: exact with durable: "
                        "true, or durable: false",
                        "'true'"});
  }
  if (limit.on_store_failure == FailureMode::kFailClosed && !limit.allow_sync_with_fail_closed) {
    problems.push_back(
        {"mode",
         "sync mode admits a bounded overshoot between syncs, but on_store_failure: fail_closed "
         "marks a limit that must stay exact (like 5 OTP guesses), which belongs on exact store "
         "checks; expected mode: exact, or set allow_sync_with_fail_closed: true to accept the "
         "overshoot",
         "'sync'"});
  }
  const auto interval = [&] { return Quoted(FormatDuration(limit.sync_interval_micros)); };
  if (limit.sync_interval_micros < kMinSyncIntervalMicros) {
    problems.push_back({"sync_interval", "expected a duration from 10ms", interval()});
  } else if (algorithm != Algorithm::kConcurrency && algorithm != Algorithm::kTokenBucket &&
             limit.numbers.window_micros > 0 &&
             limit.sync_interval_micros > limit.numbers.window_micros) {
    // Instances decide on counts up to one interval old; an interval longer than the window
    // would let whole windows pass on stale counts.
    problems.push_back({"sync_interval",
                        absl::StrCat("expected at most the window (",
                                     FormatDuration(limit.numbers.window_micros), ")"),
                        interval()});
  }
}

}  // namespace

std::vector<LimitProblem> LimitProblems(const Limit& limit) {
  std::vector<LimitProblem> problems;
  if (limit.name.empty()) problems.push_back({"name", "expected a name", "''"});
  NumbersProblems(limit.numbers, "", problems);
  LocalProblems(limit, problems);
  SyncProblems(limit, problems);
  return problems;
}

std::string FormatDuration(int64_t micros) {
  constexpr std::pair<int64_t, std::string_view> kUnits[] = {{kDay, "d"},
                                                             {3'600 * kSecond, "h"},
                                                             {60 * kSecond, "m"},
                                                             {kSecond, "s"},
                                                             {kMillisecond, "ms"}};
  for (const auto& [unit_micros, suffix] : kUnits) {
    if (micros != 0 && micros % unit_micros == 0) {
      return absl::StrCat(micros / unit_micros, AbslView(suffix));
    }
  }
  return absl::StrCat(micros, "us");
}

}  // namespace internal

absl::Status ValidateLimit(const Limit& limit) {
  const std::vector<internal::LimitProblem> problems = internal::LimitProblems(limit);
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "limit '", limit.name, "': ",
      absl::StrJoin(problems, "; ", [](std::string* out, const internal::LimitProblem& problem) {
        absl::StrAppend(out, problem.field, ": ", problem.expected,
                        problem.got.empty() ? "" : ", got ", problem.got);
      })));
}

}  // namespace tollgate
