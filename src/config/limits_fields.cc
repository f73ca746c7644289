// Copyright tollgate authors. Single fields of tollgate's format, and a limit's numbers.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "src/config/limits_parser.h"
#include "src/config/yaml_node.h"
#include "src/core/limit_problems.h"
#include "tollgate/config.h"

namespace tollgate::config {
namespace {

constexpr int64_t kMaxCount = internal::kMaxLimitCount;
constexpr double kMaxRefillPerSecond = internal::kMaxRefillPerSecond;
constexpr absl::string_view kAlgorithms[] = {"token_bucket", "fixed_window", "sliding_window",
                                             "concurrency"};

}  // namespace

const Field* Fields::Find(absl::string_view name) const {
  for (const Field& field : items) {
    if (field.name == name) return &field;
  }
  return nullptr;
}

absl::Status LimitsParser::ErrorAt(const YAML::Mark& mark, absl::string_view path,
                                   absl::string_view message) {
  return problems_.Add(mark, path, message);
}

void LimitsParser::Report(const YAML::Mark& mark, absl::string_view path,
                          absl::string_view message) {
  ErrorAt(mark, path, message).IgnoreError();
}

absl::Status LimitsParser::ErrorAtValue(const Field& field, absl::string_view path,
                                        absl::string_view message) {
  const bool empty = field.value.IsNull() || !field.value.IsDefined();
  return ErrorAt(empty ? field.key.Mark() : field.value.Mark(), path, message);
}

void LimitsParser::ReportAtValue(const Field& field, absl::string_view path,
                                 absl::string_view message) {
  ErrorAtValue(field, path, message).IgnoreError();
}

Fields LimitsParser::ReadMap(const YAML::Node& map, absl::string_view path,
                             absl::Span<const absl::string_view> allowed) {
  Fields fields;
  for (const auto& pair : map) {
    Field field{"", pair.first, pair.second};
    if (!field.key.IsScalar()) {
      Report(field.key.Mark(), path,
             absl::StrCat("expected a plain key, got ", Describe(field.key)));
      continue;
    }
    field.name = field.key.Scalar();
    const std::string field_path = path.empty() ? field.name : absl::StrCat(path, ".", field.name);
    if (!allowed.empty() &&
        std::find(allowed.begin(), allowed.end(), field.name) == allowed.end()) {
      Report(
          field.key.Mark(), field_path,
          absl::StrCat("unknown key; expected ", OneOf(allowed), DidYouMean(field.name, allowed)));
      continue;
    }
    // yaml-cpp keeps both pairs of a repeated key but `map[key]` sees only the first, so a
    // repeated key would silently lose one of its values.
    if (const Field* first = fields.Find(field.name)) {
      Report(field.key.Mark(), field_path,
             absl::StrCat("duplicate key (first at line ", first->key.Mark().line + 1, ")"));
      continue;
    }
    fields.items.push_back(std::move(field));
  }
  return fields;
}

absl::StatusOr<int64_t> LimitsParser::ParseCount(const Field& field, absl::string_view path) {
  const std::string expected =
      absl::StrCat("expected a whole number from 1 to ", kMaxCount, ", got ");
  if (!field.value.IsScalar()) {
    return ErrorAtValue(field, path, absl::StrCat(expected, Describe(field.value)));
  }
  const std::string& text = field.value.Scalar();
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 1 || value > kMaxCount) {
    return ErrorAtValue(field, path, absl::StrCat(expected, Describe(field.value)));
  }
  return value;
}

absl::StatusOr<double> LimitsParser::ParseRate(const Field& field, absl::string_view path) {
  constexpr absl::string_view kExpected =
      "expected a positive number of tokens per second such as 5 or 0.5, got ";
  if (!field.value.IsScalar()) {
    return ErrorAtValue(field, path, absl::StrCat(kExpected, Describe(field.value)));
  }
  const std::string& text = field.value.Scalar();
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || !std::isfinite(value) ||
      value <= 0) {
    return ErrorAtValue(field, path, absl::StrCat(kExpected, Describe(field.value)));
  }
  if (value > kMaxRefillPerSecond) {
    return ErrorAtValue(field, path,
                        absl::StrCat("expected at most ", kMaxRefillPerSecond,
                                     " tokens per second, got ", Describe(field.value)));
  }
  return value;
}

absl::StatusOr<int64_t> LimitsParser::ParseDuration(const Field& field, absl::string_view path,
                                                    const DurationRange& range) {
  if (!field.value.IsScalar()) {
    return ErrorAtValue(
        field, path, absl::StrCat("expected a duration such as 10ms, got ", Describe(field.value)));
  }
  absl::StatusOr<int64_t> micros = ParseDurationMicros(field.value.Scalar());
  if (!micros.ok()) return ErrorAtValue(field, path, micros.status().message());
  if (*micros < range.min_micros || *micros > range.max_micros) {
    return ErrorAtValue(
        field, path,
        absl::StrCat("expected a duration ", range.text, ", got ", Describe(field.value)));
  }
  return *micros;
}

absl::StatusOr<size_t> LimitsParser::ParseWord(const Field& field, absl::string_view path,
                                               absl::Span<const absl::string_view> words) {
  if (field.value.IsScalar()) {
    auto it = std::find(words.begin(), words.end(), field.value.Scalar());
    if (it != words.end()) return static_cast<size_t>(it - words.begin());
  }
  return ErrorAtValue(field, path,
                      absl::StrCat("expected ", OneOf(words), ", got ", Describe(field.value)));
}

absl::StatusOr<bool> LimitsParser::ParseBool(const Field& field, absl::string_view path) {
  if (field.value.IsScalar()) {
    if (field.value.Scalar() == "true") return true;
    if (field.value.Scalar() == "false") return false;
  }
  return ErrorAtValue(field, path,
                      absl::StrCat("expected true or false, got ", Describe(field.value)));
}

std::optional<LimitNumbers> LimitsParser::ParseNumbers(const Fields& fields, const Field& owner,
                                                       absl::string_view path) {
  const size_t errors_before = problems_.size();
  LimitNumbers numbers;
  const Field* algorithm = fields.Find("algorithm");
  if (algorithm == nullptr) {
    // Which numbers belong here depends on the algorithm: nothing more to check.
    Report(owner.key.Mark(), absl::StrCat(path, ".algorithm"),
           absl::StrCat("required (", OneOf(kAlgorithms), "), missing"));
    return std::nullopt;
  }
  absl::StatusOr<size_t> index =
      ParseWord(*algorithm, absl::StrCat(path, ".algorithm"), kAlgorithms);
  if (!index.ok()) return std::nullopt;
  constexpr Algorithm kByIndex[] = {Algorithm::kTokenBucket, Algorithm::kFixedWindow,
                                    Algorithm::kSlidingWindow, Algorithm::kConcurrency};
  numbers.algorithm = kByIndex[*index];
  const absl::string_view algorithm_name = kAlgorithms[*index];

  const bool bucket = numbers.algorithm == Algorithm::kTokenBucket;
  const bool concurrency = numbers.algorithm == Algorithm::kConcurrency;
  const absl::string_view needed[2] = {
      bucket ? "capacity" : "limit",
      bucket ? "refill_per_second" : (concurrency ? "lease" : "window")};
  std::vector<absl::string_view> foreign;
  for (absl::string_view name : {"capacity", "refill_per_second", "limit", "window", "lease"}) {
    if (name != needed[0] && name != needed[1]) foreign.push_back(name);
  }
  const std::string takes =
      absl::StrCat("algorithm ", algorithm_name, " takes ", needed[0], " and ", needed[1]);
  for (absl::string_view name : foreign) {
    if (const Field* field = fields.Find(name)) {
      Report(field->key.Mark(), absl::StrCat(path, ".", name),
             absl::StrCat("not a field of this limit: ", takes));
    }
  }
  for (absl::string_view name : needed) {
    if (fields.Find(name) == nullptr) {
      Report(owner.key.Mark(), absl::StrCat(path, ".", name),
             absl::StrCat("required, missing (", takes, ")"));
    }
  }

  if (bucket) {
    const Field* capacity_field = fields.Find("capacity");
    const Field* rate_field = fields.Find("refill_per_second");
    absl::StatusOr<int64_t> capacity = absl::UnknownError("missing");
    absl::StatusOr<double> rate = absl::UnknownError("missing");
    if (capacity_field != nullptr) {
      capacity = ParseCount(*capacity_field, absl::StrCat(path, ".capacity"));
    }
    if (rate_field != nullptr) {
      rate = ParseRate(*rate_field, absl::StrCat(path, ".refill_per_second"));
    }
    if (capacity.ok() && rate.ok()) {
      numbers.capacity = *capacity;
      numbers.refill_per_second = *rate;
    }
  } else {
    if (const Field* field = fields.Find("limit")) {
      absl::StatusOr<int64_t> limit = ParseCount(*field, absl::StrCat(path, ".limit"));
      if (limit.ok()) numbers.limit = *limit;
    }
    if (const Field* field = fields.Find("window")) {
      absl::StatusOr<int64_t> window =
          ParseDuration(*field, absl::StrCat(path, ".window"), kWindowRange);
      if (window.ok()) numbers.window_micros = *window;
    }
    if (const Field* field = fields.Find("lease")) {  // a concurrency limit's lease time
      absl::StatusOr<int64_t> lease =
          ParseDuration(*field, absl::StrCat(path, ".lease"), kLeaseRange);
      if (lease.ok()) numbers.window_micros = *lease;
    }
  }
  if (problems_.size() != errors_before) return std::nullopt;
  return numbers;
}

}  // namespace tollgate::config
