// Copyright tollgate authors.
#include "src/config/problems.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tollgate::config {

absl::Status Problems::Add(const YAML::Mark& mark, absl::string_view path,
                           absl::string_view message) {
  Problem problem{-1, -1, ""};
  if (mark.is_null()) {
    problem.text = absl::StrCat(file_name_, ": ");
  } else {
    problem.line = mark.line;
    problem.column = mark.column;
    problem.text = absl::StrCat(file_name_, ":", mark.line + 1, ":", mark.column + 1, ": ");
  }
  if (!path.empty()) absl::StrAppend(&problem.text, path, ": ");
  absl::StrAppend(&problem.text, message);
  absl::Status status = absl::InvalidArgumentError(problem.text);
  problems_.push_back(std::move(problem));
  return status;
}

absl::Status Problems::ToStatus() const {
  if (problems_.empty()) return absl::OkStatus();
  std::vector<const Problem*> ordered;
  ordered.reserve(problems_.size());
  for (const Problem& problem : problems_) ordered.push_back(&problem);
  std::stable_sort(ordered.begin(), ordered.end(), [](const Problem* a, const Problem* b) {
    return a->line != b->line ? a->line < b->line : a->column < b->column;
  });
  std::string message;
  for (size_t i = 0; i < ordered.size() && i < kMaxReported; ++i) {
    if (i > 0) message.push_back('\n');
    message += ordered[i]->text;
  }
  if (ordered.size() > kMaxReported) {
    absl::StrAppend(&message, "\n", file_name_, ": and ", ordered.size() - kMaxReported,
                    " more errors");
  }
  return absl::InvalidArgumentError(message);
}

}  // namespace tollgate::config
