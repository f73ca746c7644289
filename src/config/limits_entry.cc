// Copyright tollgate authors. One limit of tollgate's format (LimitsParser::ParseLimit).
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "src/config/limits_parser.h"
#include "src/config/yaml_node.h"
#include "src/core/limit_problems.h"
#include "tollgate/limit.h"

namespace tollgate::config {
namespace {

constexpr absl::string_view kLimitKeys[] = {"algorithm",
                                            "capacity",
                                            "refill_per_second",
                                            "limit",
                                            "window",
                                            "lease",
                                            "on_store_failure",
                                            "timeout",
                                            "mode",
                                            "sync_interval",
                                            "shares",
                                            "local",
                                            "allow_sync_with_fail_closed",
                                            "reservation_ttl",
                                            "durable"};
// The keys of a `local:` block: an algorithm and its numbers only.
constexpr absl::string_view kNumberKeys[] = {"algorithm", "capacity", "refill_per_second",
                                             "limit",     "window",   "lease"};
constexpr absl::string_view kFailureModes[] = {"fail_open", "fail_closed", "local"};
constexpr absl::string_view kModes[] = {"exact", "sync"};
constexpr absl::string_view kShares[] = {"demand", "equal"};

std::string Sub(absl::string_view path, absl::string_view name) {
  return absl::StrCat(path, ".", name);
}

}  // namespace

std::optional<Limit> LimitsParser::ParseLimit(const Field& entry) {
  const size_t errors_before = problems_.size();
  Limit limit;
  limit.name = entry.name;
  const std::string path = absl::StrCat("limits.", entry.name);
  if (!entry.value.IsMap()) {
    ReportAtValue(entry, path,
                  absl::StrCat("expected a map of settings (algorithm, its numbers, ...), got ",
                               Describe(entry.value)));
    return std::nullopt;
  }
  const Fields fields = ReadMap(entry.value, path, kLimitKeys);
  std::optional<LimitNumbers> numbers = ParseNumbers(fields, entry, path);
  if (numbers.has_value()) limit.numbers = *numbers;
  // Whether on_store_failure is known (absent, or valid): checks of `local` depend on it.
  const bool failure_known = ReadFailureMode(fields, path, limit);
  const std::optional<Fields> local_fields = ReadLocal(fields, path, failure_known, limit);
  ReadDurations(fields, path, numbers.has_value(), limit);
  ReadMode(fields, path, failure_known, limit);
  if (problems_.size() != errors_before) return std::nullopt;
  // What the file says is well formed: now the one rule of what a limit may be.
  ReportLimitProblems(entry, fields, local_fields, limit);
  if (problems_.size() != errors_before) return std::nullopt;
  return limit;
}

bool LimitsParser::ReadFailureMode(const Fields& fields, absl::string_view path, Limit& limit) {
  const Field* field = fields.Find("on_store_failure");
  if (field == nullptr) return true;
  absl::StatusOr<size_t> index = ParseWord(*field, Sub(path, "on_store_failure"), kFailureModes);
  constexpr FailureMode kByIndex[] = {FailureMode::kFailOpen, FailureMode::kFailClosed,
                                      FailureMode::kLocal};
  if (index.ok()) limit.on_store_failure = kByIndex[*index];
  return index.ok();
}

std::optional<Fields> LimitsParser::ReadLocal(const Fields& fields, absl::string_view path,
                                              bool failure_known, Limit& limit) {
  const Field* local = fields.Find("local");
  if (local == nullptr) return std::nullopt;
  if (!failure_known || limit.on_store_failure != FailureMode::kLocal) {
    limit.local = LimitNumbers();  // present: ValidateLimit says where it is not allowed
    return std::nullopt;
  }
  if (!local->value.IsMap()) {
    ReportAtValue(*local, Sub(path, "local"),
                  absl::StrCat("expected a map with algorithm and its numbers, got ",
                               Describe(local->value)));
    return std::nullopt;
  }
  Fields local_fields = ReadMap(local->value, Sub(path, "local"), kNumberKeys);
  std::optional<LimitNumbers> numbers = ParseNumbers(local_fields, *local, Sub(path, "local"));
  if (numbers.has_value()) limit.local = *numbers;
  return local_fields;
}

void LimitsParser::ReadDurations(const Fields& fields, absl::string_view path, bool numbers_known,
                                 Limit& limit) {
  if (const Field* field = fields.Find("timeout")) {
    absl::StatusOr<int64_t> timeout = ParseDuration(*field, Sub(path, "timeout"), kTimeoutRange);
    if (timeout.ok()) limit.timeout_micros = *timeout;
  }
  if (const Field* field = fields.Find("reservation_ttl")) {
    if (numbers_known && limit.numbers.algorithm == Algorithm::kConcurrency) {
      Report(field->key.Mark(), Sub(path, "reservation_ttl"),
             "not a field of a concurrency limit: it takes leases, not reservations");
    } else {
      absl::StatusOr<int64_t> ttl =
          ParseDuration(*field, Sub(path, "reservation_ttl"), kReservationTtlRange);
      if (ttl.ok()) limit.reservation_ttl_micros = *ttl;
    }
  }
}

void LimitsParser::ReadMode(const Fields& fields, absl::string_view path, bool failure_known,
                            Limit& limit) {
  bool mode_known = true;
  if (const Field* mode = fields.Find("mode")) {
    absl::StatusOr<size_t> index = ParseWord(*mode, Sub(path, "mode"), kModes);
    if (index.ok()) limit.mode = *index == 0 ? Mode::kExact : Mode::kSync;
    mode_known = index.ok();
  }
  if (const Field* field = fields.Find("durable")) {
    absl::StatusOr<bool> durable = ParseBool(*field, Sub(path, "durable"));
    if (durable.ok()) limit.durable = *durable;
    if (durable.ok() && *durable) {
      const YAML::Mark mark = field->value.Mark();
      durable_positions_[limit.name] =
          absl::StrCat(file_name_, ":", mark.line + 1, ":", mark.column + 1);
    }
  }
  if (const Field* field = fields.Find("allow_sync_with_fail_closed")) {
    absl::StatusOr<bool> allow = ParseBool(*field, Sub(path, "allow_sync_with_fail_closed"));
    if (allow.ok()) limit.allow_sync_with_fail_closed = *allow;
  }
  const Field* sync_interval = fields.Find("sync_interval");
  if (sync_interval != nullptr && mode_known && limit.mode != Mode::kSync) {
    Report(sync_interval->key.Mark(), Sub(path, "sync_interval"),
           "only allowed with mode: sync, got mode: exact");
  } else if (sync_interval != nullptr) {
    absl::StatusOr<int64_t> interval =
        ParseDuration(*sync_interval, Sub(path, "sync_interval"), kSyncIntervalRange);
    if (interval.ok()) limit.sync_interval_micros = *interval;
  }
  // `shares` divides sync mode's grants and the fail_open fallback's local limits; anywhere
  // else it would silently do nothing.
  if (const Field* shares = fields.Find("shares")) {
    absl::StatusOr<size_t> index = ParseWord(*shares, Sub(path, "shares"), kShares);
    if (index.ok()) limit.shares = *index == 0 ? Shares::kDemand : Shares::kEqual;
    if (index.ok() && mode_known && failure_known && limit.mode != Mode::kSync &&
        limit.on_store_failure != FailureMode::kFailOpen) {
      Report(shares->key.Mark(), Sub(path, "shares"),
             absl::StrCat("only allowed with mode: sync or on_store_failure: fail_open (it divides "
                          "their shares among instances), got mode: exact and on_store_failure: ",
                          std::string(FailureModeName(limit.on_store_failure))));
    }
  }
}

void LimitsParser::ReportLimitProblems(const Field& entry, const Fields& fields,
                                       const std::optional<Fields>& local_fields,
                                       const Limit& limit) {
  const std::string path = absl::StrCat("limits.", entry.name);
  const Field* local = fields.Find("local");
  const Field* mode = fields.Find("mode");
  for (const internal::LimitProblem& problem : internal::LimitProblems(limit)) {
    const bool in_local = absl::StartsWith(problem.field, "local.");
    const Field* field = in_local && local_fields.has_value()
                             ? local_fields->Find(problem.field.substr(6))
                             : fields.Find(problem.field);
    if (in_local && problem.field == "local.algorithm") field = nullptr;
    std::string message = problem.expected;
    if (field != nullptr && problem.got_is_value) {
      absl::StrAppend(&message, ", got ", Describe(field->value));
    } else if (problem.got_is_value && !problem.got.empty()) {
      absl::StrAppend(&message, ", got the default ", problem.got);
    } else if (!problem.got.empty()) {
      absl::StrAppend(&message, ", got ", problem.got);
    }
    YAML::Mark mark = entry.key.Mark();
    if (problem.field == "local" || in_local) {
      if (local != nullptr) mark = local->key.Mark();
    } else if (problem.field == "sync_interval" && field == nullptr && mode != nullptr) {
      mark = mode->value.Mark();
    }
    if (field != nullptr && problem.field != "local") {
      ReportAtValue(*field, Sub(path, problem.field), message);
    } else {
      Report(mark, Sub(path, problem.field), message);
    }
  }
}

}  // namespace tollgate::config
