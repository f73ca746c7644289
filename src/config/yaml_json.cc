// Copyright tollgate authors.
#include "src/config/yaml_json.h"

#include <cmath>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace tollgate::config {
namespace {

// Appends `text` as a JSON string.
void AppendJsonString(absl::string_view text, std::string& out) {
  out.push_back('"');
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppend(&out, "\\u00", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

// Whether a plain scalar reads as a number in YAML (decimal, with an optional fraction and
// exponent), as envoyproxy/ratelimit's YAML decoder types it.
bool IsYamlNumber(absl::string_view text) {
  size_t i = 0;
  if (i < text.size() && (text[i] == '-' || text[i] == '+')) ++i;
  size_t digits = 0;
  while (i < text.size() && absl::ascii_isdigit(text[i])) ++i, ++digits;
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && absl::ascii_isdigit(text[i])) ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '-' || text[i] == '+')) ++i;
    size_t exponent = 0;
    while (i < text.size() && absl::ascii_isdigit(text[i])) ++i, ++exponent;
    if (exponent == 0) return false;
  }
  return i == text.size();
}

}  // namespace

void AppendYamlAsJson(const YAML::Node& node, std::string& out) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      out.push_back('{');
      bool first = true;
      for (const auto& entry : node) {
        if (!first) out.push_back(',');
        first = false;
        AppendJsonString(entry.first.IsScalar() ? entry.first.Scalar() : "", out);
        out.push_back(':');
        AppendYamlAsJson(entry.second, out);
      }
      out.push_back('}');
      return;
    }
    case YAML::NodeType::Sequence: {
      out.push_back('[');
      for (size_t i = 0; i < node.size(); ++i) {
        if (i > 0) out.push_back(',');
        AppendYamlAsJson(node[i], out);
      }
      out.push_back(']');
      return;
    }
    case YAML::NodeType::Scalar: {
      const std::string& text = node.Scalar();
      if (node.Tag() != "!") {  // plain, not quoted
        const std::string lower = absl::AsciiStrToLower(text);
        if (lower == "null" || lower == "~" || lower.empty()) {
          out += "null";
          return;
        }
        if (lower == "true" || lower == "yes" || lower == "on") {
          out += "true";
          return;
        }
        if (lower == "false" || lower == "no" || lower == "off") {
          out += "false";
          return;
        }
        if (IsYamlNumber(text)) {
          // JSON has no leading '+' nor a bare '.5' or '5.': print the double.
          double value = 0;
          if (absl::SimpleAtod(text, &value) && std::isfinite(value)) {
            absl::StrAppend(&out, value);
            return;
          }
        }
      }
      AppendJsonString(text, out);
      return;
    }
    default:
      out += "null";
  }
}

}  // namespace tollgate::config
