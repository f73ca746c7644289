// Copyright tollgate authors. Every error of one config file, reported together.
#ifndef TOLLGATE_SRC_CONFIG_PROBLEMS_H_
#define TOLLGATE_SRC_CONFIG_PROBLEMS_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "yaml-cpp/yaml.h"

namespace tollgate::config {

// The errors found while reading one file, so that a user fixes them all in one pass instead
// of one per run. Each is one line, "FILE:LINE:COLUMN: PATH: MESSAGE" (1-based line and
// column; "FILE: PATH: MESSAGE" without a position). One per parse; not thread-safe.
class Problems {
 public:
  // Lines beyond this many are summed up in one last line, so that a file of garbage cannot
  // produce a message of unbounded size.
  static constexpr size_t kMaxReported = 100;

  explicit Problems(absl::string_view file_name) : file_name_(file_name) {}

  // Records an error at `mark` (a null mark: none), under `path` when it is not empty.
  // Returns that one error as InvalidArgument.
  absl::Status Add(const YAML::Mark& mark, absl::string_view path, absl::string_view message);

  // How many errors were recorded so far.
  size_t size() const { return problems_.size(); }

  // OK when no error was recorded. Otherwise InvalidArgument whose message holds one line per
  // error in file order (by line, then column, then as recorded), joined by '\n': at most
  // kMaxReported, then "FILE: and N more errors".
  absl::Status ToStatus() const;

 private:
  struct Problem {
    int line;  // 0-based; -1 without a position
    int column;
    std::string text;
  };

  std::string file_name_;
  std::vector<Problem> problems_;
};

}  // namespace tollgate::config

#endif  // TOLLGATE_SRC_CONFIG_PROBLEMS_H_
