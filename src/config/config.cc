// Copyright tollgate authors. YAML -> validated limits: tollgate's own format.
//
// Internally absl::string_view: Debian's Abseil has its own string_view type (not
// std::string_view), and absl::StrCat takes only that one.
//
// Errors are statuses, as in envoyproxy/ratelimit's format (envoy_config.cc): every one is
// recorded with its file, line, column and field. yaml-cpp reports its own by throwing; every
// exception is caught in ParseConfig and turned into InvalidArgument the same way. Nothing
// throws past this file.
#include "tollgate/config.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "src/config/config_file.h"
#include "src/config/limits_parser.h"
#include "src/config/names.h"
#include "src/config/yaml_node.h"
#include "src/core/absl_view.h"

namespace tollgate {
namespace config {
namespace {

constexpr absl::string_view kTopLevelKeys[] = {"limits", "memory_store"};
constexpr absl::string_view kMemoryStoreKeys[] = {"max_keys"};

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

}  // namespace

absl::StatusOr<Config> LimitsParser::Parse(absl::string_view yaml_text) {
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

}  // namespace config

absl::StatusOr<Config> ParseConfig(std::string_view yaml_text, std::string_view file_name) {
  config::LimitsParser parser(AbslView(file_name));
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
