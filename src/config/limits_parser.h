// Copyright tollgate authors. The parser of tollgate's own format (tollgate/config.h), shared
// by its files: the document (config.cc), single fields and a limit's numbers
// (limits_fields.cc), and one limit (limits_entry.cc).
#ifndef TOLLGATE_SRC_CONFIG_LIMITS_PARSER_H_
#define TOLLGATE_SRC_CONFIG_LIMITS_PARSER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "src/config/field_rules.h"
#include "src/config/problems.h"
#include "src/core/limit_problems.h"
#include "tollgate/config.h"
#include "tollgate/limit.h"
#include "yaml-cpp/yaml.h"

namespace tollgate::config {

inline constexpr int64_t kMillisecond = 1'000;
inline constexpr int64_t kSecond = 1'000'000;
inline constexpr int64_t kDay = 86'400 * kSecond;

inline constexpr DurationRange kWindowRange = {1 * kMillisecond, 365 * kDay, "from 1ms to 365d"};
// The real upper bound of a sync interval is the limit's window, checked with the limit
// (ValidateLimit).
inline constexpr DurationRange kSyncIntervalRange = {internal::kMinSyncIntervalMicros, 365 * kDay,
                                                     "from 10ms to 365d"};
inline constexpr DurationRange kReservationTtlRange = {1 * kSecond, 7 * kDay, "from 1s to 7d"};
inline constexpr DurationRange kLeaseRange = {10 * kMillisecond, 1 * kDay, "from 10ms to 1d"};

// One `key: value` pair of a YAML map.
struct Field {
  std::string name;
  YAML::Node key;
  YAML::Node value;
};

// The pairs of one YAML map in file order; keys are unique.
struct Fields {
  std::vector<Field> items;

  const Field* Find(absl::string_view name) const;
};

// Reads one file. Each check records its error and the parse goes on with what does not
// depend on the failed part, so that one run reports every error of the file (Errors);
// checks that depend on a failed part are skipped rather than reported again. One per parse;
// not thread-safe.
class LimitsParser {
 public:
  explicit LimitsParser(absl::string_view file_name)
      : file_name_(file_name), problems_(file_name) {}

  // May throw yaml-cpp exceptions; ParseConfig catches them.
  absl::StatusOr<Config> Parse(absl::string_view yaml_text);

  // Records "FILE:LINE:COLUMN: PATH: MESSAGE" (1-based line and column) and returns it.
  absl::Status ErrorAt(const YAML::Mark& mark, absl::string_view path, absl::string_view message);
  // ErrorAt, when the caller goes on.
  void Report(const YAML::Mark& mark, absl::string_view path, absl::string_view message);
  // Every error recorded so far, or OK.
  absl::Status Errors() const { return problems_.ToStatus(); }

 private:
  // At the value; at the key when the value is empty, since yaml-cpp marks an empty value at
  // the token after it (often the next line).
  absl::Status ErrorAtValue(const Field& field, absl::string_view path, absl::string_view message);
  void ReportAtValue(const Field& field, absl::string_view path, absl::string_view message);

  // The pairs of `map` (a map, checked by the caller) whose keys are plain scalars, unique
  // and, unless `allowed` is empty, among `allowed`; every other pair is an error (an unknown
  // key with the closest allowed one as a suggestion) and left out.
  Fields ReadMap(const YAML::Node& map, absl::string_view path,
                 absl::Span<const absl::string_view> allowed);

  // nullopt when the limit has an error (recorded).
  std::optional<Limit> ParseLimit(const Field& entry);
  // The parts of ParseLimit, each reading `fields` of the limit at `path` into `limit`.
  // ReadFailureMode: false when on_store_failure is given and wrong.
  bool ReadFailureMode(const Fields& fields, absl::string_view path, Limit& limit);
  // The `local:` block's fields, when it was read (on_store_failure: local).
  std::optional<Fields> ReadLocal(const Fields& fields, absl::string_view path, bool failure_known,
                                  Limit& limit);
  void ReadDurations(const Fields& fields, absl::string_view path, bool numbers_known,
                     Limit& limit);
  void ReadMode(const Fields& fields, absl::string_view path, bool failure_known, Limit& limit);
  // The limit's problems by the one rule of what a limit may be (ValidateLimit), each at its
  // field, or where the limit or its default shows for a field left out.
  void ReportLimitProblems(const Field& entry, const Fields& fields,
                           const std::optional<Fields>& local_fields, const Limit& limit);

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
  Problems problems_;
  // Config::durable_positions of the limits read so far.
  std::map<std::string, std::string> durable_positions_;
};

}  // namespace tollgate::config

#endif  // TOLLGATE_SRC_CONFIG_LIMITS_PARSER_H_
