// Copyright tollgate authors. YAML -> validated limits.
//
// Internally absl::string_view: Debian's Abseil has its own string_view type (not
// std::string_view), and absl::StrCat takes only that one.
//
// yaml-cpp reports errors by throwing; every exception is caught in ParseConfig and turned
// into InvalidArgument naming the file, line, column and field. Nothing throws past this file.
#include "tollgate/config.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "src/config/config_file.h"
#include "src/config/names.h"
#include "src/config/problems.h"
#include "src/config/yaml_node.h"
#include "src/core/absl_view.h"
#include "src/core/limit_problems.h"
#include "tollgate/limit.h"

namespace tollgate {
namespace {

constexpr int64_t kMillisecond = 1'000;
constexpr int64_t kSecond = 1'000'000;
constexpr int64_t kDay = 86'400 * kSecond;

constexpr int64_t kMaxCount = internal::kMaxLimitCount;
constexpr double kMaxRefillPerSecond = internal::kMaxRefillPerSecond;

// The accepted durations of one field, and how an error message states them.
struct DurationRange {
  int64_t min_micros;
  int64_t max_micros;
  absl::string_view text;
};
constexpr DurationRange kTimeoutRange = {1 * kMillisecond, 60 * kSecond, "from 1ms to 60s"};
constexpr DurationRange kWindowRange = {1 * kMillisecond, 365 * kDay, "from 1ms to 365d"};
// The real upper bound of a sync interval is the limit's window, checked separately.
constexpr DurationRange kSyncIntervalRange = {10 * kMillisecond, 365 * kDay, "from 10ms to 365d"};
constexpr DurationRange kReservationTtlRange = {1 * kSecond, 7 * kDay, "from 1s to 7d"};
constexpr DurationRange kLeaseRange = {10 * kMillisecond, 1 * kDay, "from 10ms to 1d"};

constexpr absl::string_view kTopLevelKeys[] = {"limits", "memory_store"};
constexpr absl::string_view kMemoryStoreKeys[] = {"max_keys"};
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
constexpr absl::string_view kAlgorithms[] = {"token_bucket", "fixed_window", "sliding_window",
                                             "concurrency"};
constexpr absl::string_view kFailureModes[] = {"fail_open", "fail_closed", "local"};
constexpr absl::string_view kModes[] = {"exact", "sync"};
constexpr absl::string_view kShares[] = {"demand", "equal"};

// One `key: value` pair of a YAML map.
struct Field {
  std::string name;
  YAML::Node key;
  YAML::Node value;
};

// The pairs of one YAML map in file order; keys are unique.
struct Fields {
  std::vector<Field> items;

  const Field* Find(absl::string_view name) const {
    for (const Field& field : items) {
      if (field.name == name) return &field;
    }
    return nullptr;
  }
};

std::string Describe(const YAML::Node& node) { return config::DescribeNode(node); }

std::string OneOf(absl::Span<const absl::string_view> words) { return absl::StrJoin(words, ", "); }

// Reads one file. Each check records its error in `problems_` and the parse goes on with
// what does not depend on the failed part, so that one run reports every error of the file
// (Problems::ToStatus); checks that depend on a failed part are skipped rather than
// reported again.
class Parser {
 public:
  explicit Parser(absl::string_view file_name) : file_name_(file_name), problems_(file_name) {}

  // May throw yaml-cpp exceptions; ParseConfig catches them.
  absl::StatusOr<Config> Parse(absl::string_view yaml_text);

  // Records "FILE:LINE:COLUMN: PATH: MESSAGE" (1-based line and column) and returns it.
  absl::Status ErrorAt(const YAML::Mark& mark, absl::string_view path, absl::string_view message) {
    return problems_.Add(mark, path, message);
  }

  // ErrorAt, when the caller goes on.
  void Report(const YAML::Mark& mark, absl::string_view path, absl::string_view message) {
    ErrorAt(mark, path, message).IgnoreError();
  }

  // Every error recorded so far, or OK.
  absl::Status Errors() const { return problems_.ToStatus(); }

 private:
  // At the value; at the key when the value is empty, since yaml-cpp marks an empty value at
  // the token after it (often the next line).
  absl::Status ErrorAtValue(const Field& field, absl::string_view path, absl::string_view message) {
    const bool empty = field.value.IsNull() || !field.value.IsDefined();
    return ErrorAt(empty ? field.key.Mark() : field.value.Mark(), path, message);
  }

  void ReportAtValue(const Field& field, absl::string_view path, absl::string_view message) {
    ErrorAtValue(field, path, message).IgnoreError();
  }

  // The pairs of `map` (a map, checked by the caller) whose keys are plain scalars, unique
  // and, unless `allowed` is empty, among `allowed`; every other pair is an error (an unknown
  // key with the closest allowed one as a suggestion) and left out.
  Fields ReadMap(const YAML::Node& map, absl::string_view path,
                 absl::Span<const absl::string_view> allowed);

  // nullopt when the limit has an error (recorded).
  std::optional<Limit> ParseLimit(const Field& entry);
  // Reads `algorithm` and its numbers from `fields`. A missing one is reported at
  // `owner`'s key (the limit's name, or `local:`). nullopt on an error (recorded).
  std::optional<LimitNumbers> ParseNumbers(const Fields& fields, const Field& owner,
                                           absl::string_view path);
  absl::StatusOr<int64_t> ParseCount(const Field& field, absl::string_view path);
  absl::StatusOr<double> ParseRate(const Field& field, absl::string_view path);
  absl::StatusOr<int64_t> ParseDuration(const Field& field, absl::string_view path,
                                        const DurationRange& range);
  // Returns the index of the value in `words`.
  absl::StatusOr<size_t> ParseWord(const Field& field, absl::string_view path,
                                   absl::Span<const absl::string_view> words);
  absl::StatusOr<bool> ParseBool(const Field& field, absl::string_view path);

  const std::string file_name_;
  config::Problems problems_;
  // Config::durable_positions of the limits read so far.
  std::map<std::string, std::string> durable_positions_;
};

Fields Parser::ReadMap(const YAML::Node& map, absl::string_view path,
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
      std::string message = absl::StrCat("unknown key; expected one of ", OneOf(allowed));
      if (absl::string_view suggestion = config_internal::ClosestName(field.name, allowed);
          !suggestion.empty()) {
        absl::StrAppend(&message, " (did you mean '", suggestion, "'?)");
      }
      Report(field.key.Mark(), field_path, message);
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

absl::StatusOr<int64_t> Parser::ParseCount(const Field& field, absl::string_view path) {
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

absl::StatusOr<double> Parser::ParseRate(const Field& field, absl::string_view path) {
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

absl::StatusOr<int64_t> Parser::ParseDuration(const Field& field, absl::string_view path,
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

absl::StatusOr<size_t> Parser::ParseWord(const Field& field, absl::string_view path,
                                         absl::Span<const absl::string_view> words) {
  if (field.value.IsScalar()) {
    auto it = std::find(words.begin(), words.end(), field.value.Scalar());
    if (it != words.end()) return static_cast<size_t>(it - words.begin());
  }
  return ErrorAtValue(
      field, path, absl::StrCat("expected one of ", OneOf(words), ", got ", Describe(field.value)));
}

absl::StatusOr<bool> Parser::ParseBool(const Field& field, absl::string_view path) {
  if (field.value.IsScalar()) {
    if (field.value.Scalar() == "true") return true;
    if (field.value.Scalar() == "false") return false;
  }
  return ErrorAtValue(field, path,
                      absl::StrCat("expected true or false, got ", Describe(field.value)));
}

std::optional<LimitNumbers> Parser::ParseNumbers(const Fields& fields, const Field& owner,
                                                 absl::string_view path) {
  const size_t errors_before = problems_.size();
  LimitNumbers numbers;
  const Field* algorithm = fields.Find("algorithm");
  if (algorithm == nullptr) {
    // Which numbers belong here depends on the algorithm: nothing more to check.
    Report(owner.key.Mark(), absl::StrCat(path, ".algorithm"),
           absl::StrCat("required (one of ", OneOf(kAlgorithms), "), missing"));
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

std::optional<Limit> Parser::ParseLimit(const Field& entry) {
  const size_t errors_before = problems_.size();
  Limit limit;
  limit.name = entry.name;
  const std::string path = absl::StrCat("limits.", entry.name);
  const auto sub = [&path](absl::string_view name) { return absl::StrCat(path, ".", name); };

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
  bool failure_known = true;
  if (const Field* field = fields.Find("on_store_failure")) {
    absl::StatusOr<size_t> index = ParseWord(*field, sub("on_store_failure"), kFailureModes);
    constexpr FailureMode kByIndex[] = {FailureMode::kFailOpen, FailureMode::kFailClosed,
                                        FailureMode::kLocal};
    if (index.ok()) limit.on_store_failure = kByIndex[*index];
    failure_known = index.ok();
  }

  const Field* local = fields.Find("local");
  std::optional<Fields> local_fields;
  if (local != nullptr && failure_known && limit.on_store_failure == FailureMode::kLocal) {
    if (!local->value.IsMap()) {
      ReportAtValue(*local, sub("local"),
                    absl::StrCat("expected a map with algorithm and its numbers, got ",
                                 Describe(local->value)));
    } else {
      local_fields = ReadMap(local->value, sub("local"), kNumberKeys);
      std::optional<LimitNumbers> local_numbers = ParseNumbers(*local_fields, *local, sub("local"));
      if (local_numbers.has_value()) limit.local = *local_numbers;
    }
  } else if (local != nullptr) {
    limit.local = LimitNumbers();  // present: ValidateLimit says where it is not allowed
  }

  if (const Field* field = fields.Find("timeout")) {
    absl::StatusOr<int64_t> timeout = ParseDuration(*field, sub("timeout"), kTimeoutRange);
    if (timeout.ok()) limit.timeout_micros = *timeout;
  }

  const bool concurrency =
      numbers.has_value() && limit.numbers.algorithm == Algorithm::kConcurrency;
  if (const Field* field = fields.Find("reservation_ttl")) {
    if (concurrency) {
      Report(field->key.Mark(), sub("reservation_ttl"),
             "not a field of a concurrency limit: it takes leases, not reservations");
    } else {
      absl::StatusOr<int64_t> ttl =
          ParseDuration(*field, sub("reservation_ttl"), kReservationTtlRange);
      if (ttl.ok()) limit.reservation_ttl_micros = *ttl;
    }
  }

  const Field* mode = fields.Find("mode");
  bool mode_known = true;
  if (mode != nullptr) {
    absl::StatusOr<size_t> index = ParseWord(*mode, sub("mode"), kModes);
    if (index.ok()) limit.mode = *index == 0 ? Mode::kExact : Mode::kSync;
    mode_known = index.ok();
  }
  if (const Field* field = fields.Find("allow_sync_with_fail_closed")) {
    absl::StatusOr<bool> allow = ParseBool(*field, sub("allow_sync_with_fail_closed"));
    if (allow.ok()) limit.allow_sync_with_fail_closed = *allow;
  }
  if (const Field* field = fields.Find("durable")) {
    absl::StatusOr<bool> durable = ParseBool(*field, sub("durable"));
    if (durable.ok()) limit.durable = *durable;
    if (durable.ok() && *durable) {
      const YAML::Mark mark = field->value.Mark();
      durable_positions_[entry.name] =
          absl::StrCat(file_name_, ":", mark.line + 1, ":", mark.column + 1);
    }
  }
  const Field* sync_interval = fields.Find("sync_interval");
  if (sync_interval != nullptr && mode_known && limit.mode != Mode::kSync) {
    Report(sync_interval->key.Mark(), sub("sync_interval"),
           "only allowed with mode: sync, got mode: exact");
  } else if (sync_interval != nullptr) {
    absl::StatusOr<int64_t> interval =
        ParseDuration(*sync_interval, sub("sync_interval"), kSyncIntervalRange);
    if (interval.ok()) limit.sync_interval_micros = *interval;
  }
  // `shares` divides sync mode's grants and the fail_open fallback's local limits; anywhere
  // else it would silently do nothing.
  if (const Field* shares = fields.Find("shares")) {
    absl::StatusOr<size_t> index = ParseWord(*shares, sub("shares"), kShares);
    if (index.ok()) limit.shares = *index == 0 ? Shares::kDemand : Shares::kEqual;
    if (index.ok() && mode_known && failure_known && limit.mode != Mode::kSync &&
        limit.on_store_failure != FailureMode::kFailOpen) {
      Report(shares->key.Mark(), sub("shares"),
             absl::StrCat("only allowed with mode: sync or on_store_failure: fail_open (it divides "
                          "their shares among instances), got mode: exact and on_store_failure: ",
                          std::string(FailureModeName(limit.on_store_failure))));
    }
  }
  if (problems_.size() != errors_before) return std::nullopt;
  // What the file says is well formed: the one rule of what a limit may be, each problem
  // at its field (or, for a field left out, where the limit or its default shows).
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
      ReportAtValue(*field, sub(problem.field), message);
    } else {
      Report(mark, sub(problem.field), message);
    }
  }
  if (problems_.size() != errors_before) return std::nullopt;
  return limit;
}

// Where the second YAML document of a stream starts, if there is one. Reads at most two
// documents: yaml-cpp 0.7's LoadAll never ends on some malformed input (found by
// fuzz/config_fuzz), reporting one empty document after another.
std::optional<YAML::Mark> SecondDocument(const std::string& text) {
  class Marks final : public YAML::EventHandler {
   public:
    void OnDocumentStart(const YAML::Mark& mark) override { last = mark; }
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
    void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
    void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  const std::string&) override {}
    void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                         YAML::EmitterStyle::value) override {}
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                    YAML::EmitterStyle::value) override {}
    void OnMapEnd() override {}
    YAML::Mark last;
  } marks;
  std::istringstream in(text);
  YAML::Parser parser(in);
  if (!parser.HandleNextDocument(marks)) return std::nullopt;
  if (!parser.HandleNextDocument(marks)) return std::nullopt;
  return marks.last;
}

absl::StatusOr<Config> Parser::Parse(absl::string_view yaml_text) {
  const std::string text(yaml_text);
  if (std::optional<YAML::Mark> second = SecondDocument(text)) {
    return ErrorAt(*second, "", "expected one YAML document, got more");
  }
  const YAML::Node document = YAML::Load(text);
  YAML::Mark start;  // 0:0, shown as 1:1.
  if (document.IsNull()) {
    return ErrorAt(start, "", "expected a top-level 'limits:' map, got an empty file");
  }
  const YAML::Node& root = document;
  if (!root.IsMap()) {
    return ErrorAt(root.Mark(), "",
                   absl::StrCat("expected a top-level 'limits:' map, got ", Describe(root)));
  }
  const size_t errors_before_top = problems_.size();
  const Fields top = ReadMap(root, "", kTopLevelKeys);
  const bool top_has_errors = problems_.size() != errors_before_top;
  Config config;
  const Field* limits = top.Find("limits");
  if (limits == nullptr) {
    // A misspelt `limits:` already has its error (with "did you mean"); a second one saying
    // it is missing would only repeat it.
    if (!top_has_errors) Report(root.Mark(), "limits", "required top-level key, missing");
  } else if (!limits->value.IsMap()) {
    ReportAtValue(*limits, "limits",
                  absl::StrCat("expected a map from limit name to its settings, got ",
                               Describe(limits->value)));
  } else if (limits->value.size() == 0) {
    ReportAtValue(*limits, "limits", "expected at least one limit, got an empty map");
  } else {
    const Fields entries = ReadMap(limits->value, "limits", {});
    for (const Field& entry : entries.items) {
      if (std::string problem = config_internal::LimitNameProblem(entry.name); !problem.empty()) {
        Report(entry.key.Mark(), "limits", absl::StrCat(problem, ", got ", Describe(entry.key)));
        continue;
      }
      std::optional<Limit> limit = ParseLimit(entry);
      if (limit.has_value()) config.limits.push_back(*std::move(limit));
    }
    std::sort(config.limits.begin(), config.limits.end(),
              [](const Limit& a, const Limit& b) { return a.name < b.name; });
  }
  if (const Field* memory = top.Find("memory_store")) {
    if (!memory->value.IsMap()) {
      ReportAtValue(*memory, "memory_store",
                    absl::StrCat("expected a map (max_keys), got ", Describe(memory->value)));
    } else {
      const Fields fields = ReadMap(memory->value, "memory_store", kMemoryStoreKeys);
      if (const Field* max_keys = fields.Find("max_keys")) {
        absl::StatusOr<int64_t> value = ParseCount(*max_keys, "memory_store.max_keys");
        if (value.ok()) config.memory_store_max_keys = *value;
      }
    }
  }
  if (absl::Status errors = Errors(); !errors.ok()) return errors;
  config.durable_positions = std::move(durable_positions_);
  return config;
}

}  // namespace

absl::StatusOr<Config> ParseConfig(std::string_view yaml_text, std::string_view file_name) {
  Parser parser(AbslView(file_name));
  try {
    return parser.Parse(AbslView(yaml_text));
  } catch (const YAML::ParserException& e) {
    parser.Report(e.mark, "", absl::StrCat("invalid YAML: ", e.msg));
    return parser.Errors();
  } catch (const YAML::Exception& e) {
    parser.Report(e.mark, "", e.msg);
    return parser.Errors();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(std::string(file_name), ": ", e.what()));
  }
}

absl::StatusOr<Config> LoadConfigFile(const std::string& path) {
  absl::StatusOr<std::string> text = config::ReadConfigFile(path, "");
  if (!text.ok()) return text.status();
  return ParseConfig(*text, path);
}

}  // namespace tollgate
