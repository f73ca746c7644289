// Copyright tollgate authors.
#include "src/server/json_errors.h"

#include <cstdint>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tollgate::server {
namespace {

using nlohmann::json;

// The length of the well-formed UTF-8 sequence at text[at] (Unicode 15, table 3-7), or 0.
size_t Utf8SequenceLength(absl::string_view text, size_t at) {
  auto byte = [&](size_t i) -> int {
    return at + i < text.size() ? static_cast<unsigned char>(text[at + i]) : -1;
  };
  auto in = [](int b, int low, int high) { return b >= low && b <= high; };
  const int lead = byte(0);
  if (lead < 0x80) return 1;
  if (in(lead, 0xC2, 0xDF)) return in(byte(1), 0x80, 0xBF) ? 2 : 0;
  if (in(lead, 0xE0, 0xEF)) {
    const int low = lead == 0xE0 ? 0xA0 : 0x80;
    const int high = lead == 0xED ? 0x9F : 0xBF;
    return in(byte(1), low, high) && in(byte(2), 0x80, 0xBF) ? 3 : 0;
  }
  if (in(lead, 0xF0, 0xF4)) {
    const int low = lead == 0xF0 ? 0x90 : 0x80;
    const int high = lead == 0xF4 ? 0x8F : 0xBF;
    return in(byte(1), low, high) && in(byte(2), 0x80, 0xBF) && in(byte(3), 0x80, 0xBF) ? 4 : 0;
  }
  return 0;
}

// A code point that the body holds neither raw nor as a \u escape, to stand for its invalid
// bytes: one of the noncharacters U+FDD0..U+FDEF, as UTF-8. nullopt if the body holds all.
std::optional<std::string> PickMarker(absl::string_view body) {
  const std::string lowered = absl::AsciiStrToLower(body);
  for (uint32_t code = 0xFDD0; code <= 0xFDEF; ++code) {
    std::string utf8 = {static_cast<char>(0xE0 | (code >> 12)),
                        static_cast<char>(0x80 | ((code >> 6) & 0x3F)),
                        static_cast<char>(0x80 | (code & 0x3F))};
    if (absl::StrContains(body, utf8)) continue;
    if (absl::StrContains(lowered, absl::StrFormat("\\u%04x", code))) continue;
    return utf8;
  }
  return std::nullopt;
}

// One step of a field path: `.name` for a plain name, `["..."]` for any other.
std::string PathStep(absl::string_view path, const std::string& key) {
  bool plain = !key.empty();
  for (char c : key) plain &= absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
  if (!plain) return absl::StrCat(path, "[", QuoteForMessage(key), "]");
  return path == "body" ? key : absl::StrCat(path, ".", key);
}

// The message for the first string or field name (in the document's order of keys) that
// holds `marker`, or nullopt.
std::optional<std::string> FindMarker(const json& value, const std::string& path,
                                      const std::string& marker) {
  if (value.is_string()) {
    if (absl::StrContains(value.get_ref<const std::string&>(), marker)) {
      return absl::StrCat(path, ": not valid UTF-8");
    }
  } else if (value.is_array()) {
    for (size_t i = 0; i < value.size(); ++i) {
      std::string step =
          path == "body" ? absl::StrCat("[", i, "]") : absl::StrCat(path, "[", i, "]");
      if (auto found = FindMarker(value[i], step, marker)) return found;
    }
  } else if (value.is_object()) {
    for (const auto& [key, member] : value.items()) {
      if (absl::StrContains(key, marker))
        return absl::StrCat(path, ": a field name is not valid UTF-8");
      if (auto found = FindMarker(member, PathStep(path, key), marker)) return found;
    }
  }
  return std::nullopt;
}

// nlohmann's message without its "[json.exception...] " prefix and without the quote of the
// input ("; last read: '...'" and what follows it).
std::string ParserComplaint(const json::exception& error) {
  std::string_view text = error.what();
  const size_t prefix_end = text.find("] ");
  if (text.starts_with("[json.exception.") && prefix_end != std::string_view::npos) {
    text.remove_prefix(prefix_end + 2);
  }
  const size_t quote = text.find("; last read: ");
  if (quote != std::string_view::npos) return std::string(text.substr(0, quote));
  // Every parse error but the empty input's quotes the input; without the quote, say where.
  if (text.find("empty input") != std::string_view::npos) return "empty input";
  return "";
}

// `value` serialized with only printable ASCII: ensure_ascii escapes all but DEL, escaped here.
std::string AsciiJson(const json& value) {
  std::string text = value.dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace);
  for (size_t at = text.find('\x7F'); at != std::string::npos; at = text.find('\x7F', at)) {
    text.replace(at, 1, "\\u007f");
  }
  return text;
}

}  // namespace

absl::StatusOr<nlohmann::json> ParseJsonBody(std::string_view std_body, int max_depth) {
  const absl::string_view body(std_body.data(), std_body.size());
  if (body.empty()) return absl::InvalidArgumentError("empty body: expected a JSON object");

  // Invalid bytes are replaced by a marker that the body does not hold, so that the parser
  // builds the document and the marker shows which field held them.
  std::string cleaned;
  std::optional<size_t> first_invalid;
  std::optional<std::string> marker;
  for (size_t at = 0; at < body.size();) {
    const size_t length = Utf8SequenceLength(body, at);
    if (length != 0) {
      if (first_invalid) cleaned.append(body.data() + at, length);
      at += length;
      continue;
    }
    if (!first_invalid) {
      first_invalid = at;
      marker = PickMarker(body);
      if (!marker) {
        return absl::InvalidArgumentError(
            absl::StrCat("invalid JSON: not valid UTF-8 at byte ", at));
      }
      cleaned.assign(body.data(), at);
    }
    cleaned.append(*marker);
    ++at;
  }
  const absl::string_view text = first_invalid ? absl::string_view(cleaned) : body;

  bool too_deep = false;
  json::parser_callback_t limit_depth = [&too_deep, max_depth](int depth, json::parse_event_t,
                                                               json&) {
    if (depth > max_depth) {
      too_deep = true;
      return false;
    }
    return true;
  };
  json document;
  try {
    document = json::parse(text.begin(), text.end(), limit_depth);
  } catch (const json::parse_error& error) {
    if (first_invalid) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid JSON: not valid UTF-8 at byte ", *first_invalid));
    }
    std::string complaint = ParserComplaint(error);
    if (complaint.empty()) complaint = absl::StrCat("error at byte ", error.byte);
    return absl::InvalidArgumentError(absl::StrCat("invalid JSON: ", complaint));
  } catch (const json::out_of_range&) {
    return absl::InvalidArgumentError("invalid JSON: a number out of range");
  } catch (const json::exception&) {
    return absl::InvalidArgumentError("invalid JSON");
  }
  if (too_deep) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid JSON: nested deeper than ", max_depth, " levels"));
  }
  if (first_invalid) {
    std::optional<std::string> found = FindMarker(document, "body", *marker);
    return absl::InvalidArgumentError(
        found ? *found : absl::StrCat("invalid JSON: not valid UTF-8 at byte ", *first_invalid));
  }
  return document;
}

std::string RlsJsonParseErrorMessage(std::string_view body, absl::string_view parser_message) {
  constexpr int kMaxRlsJsonDepth = 16;  // a RateLimitRequest is 4 levels deep
  absl::StatusOr<json> document = ParseJsonBody(body, kMaxRlsJsonDepth);
  if (!document.ok()) return std::string(document.status().message());
  return absl::StrCat("invalid JSON request: ", EscapeForMessage(parser_message));
}

std::string QuoteForMessage(absl::string_view text) {
  constexpr size_t kMaxQuoted = 64;
  absl::string_view shown = text;
  if (shown.size() > kMaxQuoted) {
    size_t cut = kMaxQuoted;
    // Back up over continuation bytes so that a character is not cut in two.
    while (cut > 0 && (static_cast<unsigned char>(shown[cut]) & 0xC0) == 0x80) --cut;
    shown = shown.substr(0, cut);
  }
  std::string quoted = AsciiJson(json(std::string(shown)));
  if (shown.size() < text.size()) quoted.insert(quoted.size() - 1, "...");
  return quoted;
}

std::string ShowForMessage(const nlohmann::json& value) {
  constexpr size_t kMaxShown = 64;
  std::string text = AsciiJson(value);
  if (text.size() > kMaxShown) text = absl::StrCat(text.substr(0, kMaxShown), "...");
  return text;
}

std::string EscapeForMessage(absl::string_view text, size_t max_bytes) {
  std::string escaped;
  for (char c : text) {
    if (escaped.size() >= max_bytes) return absl::StrCat(escaped, "...");
    const unsigned char byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7F) {
      escaped.push_back(c);
    } else {
      absl::StrAppendFormat(&escaped, "\\x%02X", byte);
    }
  }
  return escaped;
}

}  // namespace tollgate::server
