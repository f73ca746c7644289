// Copyright tollgate authors. Reading one environment's variables, every error kept.
#ifndef TOLLGATE_SRC_CLI_ENVIRONMENT_READER_H_
#define TOLLGATE_SRC_CLI_ENVIRONMENT_READER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/cli/go_values.h"
#include "src/cli/ratelimit_environment.h"
#include "src/core/absl_view.h"

namespace tollgate::cli {

// Reads the variables of envoyproxy/ratelimit's environment (ratelimit_environment.h),
// keeping every error and notice for the caller: a value that cannot be used is an error
// naming its variable, and the fallback is returned in its place. Not thread-safe.
class EnvironmentReader {
 public:
  explicit EnvironmentReader(const EnvironmentLookup& lookup) : lookup_(lookup) {}

  // The variable's value; nullopt when it is unset or empty.
  std::optional<std::string> Get(std::string_view name) const {
    std::optional<std::string> value = lookup_(name);
    if (value.has_value() && value->empty()) return std::nullopt;
    return value;
  }

  std::string String(std::string_view name, std::string_view fallback) const {
    return Get(name).value_or(std::string(fallback));
  }

  // The variable as Go's strconv reads it (ParseGoBool, ParseGoInt, ParseGoFloat), within
  // [min, max]; `fallback` when it is unset, or (with an error) unusable.
  bool Bool(std::string_view name, bool fallback) {
    std::optional<std::string> value = Get(name);
    if (!value) return fallback;
    std::optional<bool> parsed = ParseGoBool(*value);
    if (!parsed) {
      Error(name, "expected true or false (or 1, 0, t, f)");
      return fallback;
    }
    return *parsed;
  }

  int64_t Int(std::string_view name, int64_t fallback, int64_t min, int64_t max) {
    std::optional<std::string> value = Get(name);
    if (!value) return fallback;
    std::optional<int64_t> parsed = ParseGoInt(*value);
    if (!parsed || *parsed < min || *parsed > max) {
      Error(name, absl::StrCat("expected an integer from ", min, " to ", max));
      return fallback;
    }
    return *parsed;
  }

  double Float(std::string_view name, double fallback, double min, double max) {
    std::optional<std::string> value = Get(name);
    if (!value) return fallback;
    std::optional<double> parsed = ParseGoFloat(*value);
    if (!parsed || *parsed < min || *parsed > max) {
      Error(name, absl::StrCat("expected a number from ", min, " to ", max));
      return fallback;
    }
    return *parsed;
  }

  // In milliseconds; `fallback_ms` when unset.
  int64_t DurationMs(std::string_view name, int64_t fallback_ms) {
    std::optional<std::string> value = Get(name);
    if (!value) return fallback_ms;
    std::optional<int64_t> micros = ParseGoDurationMicros(*value);
    if (!micros || *micros < 0) {
      Error(name, "expected a duration such as 500ms, 10s or 1m30s");
      return fallback_ms;
    }
    return *micros / 1000;
  }

  // A notice when `name` is set: tollgate does not use it, for `why`.
  void NotUsed(std::string_view name, std::string_view why) {
    if (Get(name))
      notices_.push_back(absl::StrCat(AbslView(name), " is not used by tollgate: ", AbslView(why)));
  }

  // Records "NAME: WHAT".
  void Error(std::string_view name, std::string_view what) {
    errors_.push_back(absl::StrCat(AbslView(name), ": ", AbslView(what)));
  }

  std::vector<std::string>& notices() { return notices_; }
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  const EnvironmentLookup& lookup_;
  std::vector<std::string> notices_;
  std::vector<std::string> errors_;
};

}  // namespace tollgate::cli

#endif  // TOLLGATE_SRC_CLI_ENVIRONMENT_READER_H_
