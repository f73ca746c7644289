// Copyright tollgate authors.
#include "src/config/yaml_node.h"

#include <cstddef>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/config/names.h"

namespace tollgate::config {

// A scalar longer than this is cut in messages, so an error line stays readable.
constexpr size_t kMaxShownBytes = 64;

std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return "nothing";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Scalar:
      break;
  }
  const std::string& text = node.Scalar();
  if (text.size() <= kMaxShownBytes) return absl::StrCat("'", text, "'");
  return absl::StrCat("'", text.substr(0, kMaxShownBytes), "...'");
}

std::string OneOf(absl::Span<const absl::string_view> words) {
  return absl::StrCat("one of ", absl::StrJoin(words, ", "));
}

std::string DidYouMean(absl::string_view typed, absl::Span<const absl::string_view> allowed) {
  const absl::string_view suggestion = config_internal::ClosestName(typed, allowed);
  if (suggestion.empty()) return "";
  return absl::StrCat(" (did you mean '", suggestion, "'?)");
}

}  // namespace tollgate::config
