// Copyright tollgate authors. Parsing a client's JSON body, and error messages about it that
// never echo its bytes.
//
// An HTTP error body is always valid JSON ({"error": message}) and carries none of the
// request's raw bytes: a parser's own message (nlohmann's "last read: '...'", protobuf's quote
// of the input) is never passed through as it is. A message names the field and the problem
// instead: `descriptors[0].entries[0].key: not valid UTF-8`.
#ifndef TOLLGATE_SRC_SERVER_JSON_ERRORS_H_
#define TOLLGATE_SRC_SERVER_JSON_ERRORS_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace tollgate::server {

// Parses `body` as one JSON document, refusing values nested deeper than `max_depth` before
// they are built. Never throws. On success returns the document, whose strings are valid UTF-8.
// On failure returns InvalidArgument with a message that contains no byte of `body`:
//   `<path>: not valid UTF-8` (e.g. `checks[1].key`; `body` for the top level) when a string
//       holds invalid UTF-8, or `<path>: a field name is not valid UTF-8`;
//   `invalid JSON: not valid UTF-8 at byte N` when invalid UTF-8 stands outside any string;
//   `invalid JSON at line L, column C: <what the parser found wrong>` for a syntax error;
//   `invalid JSON: nested deeper than N levels`; `empty body: expected a JSON object`.
absl::StatusOr<nlohmann::json> ParseJsonBody(std::string_view body, int max_depth);

// The message for a POST /json body that protobuf's JSON parser refused with `parser_message`:
// ParseJsonBody's message when the body is not valid JSON (or not valid UTF-8), otherwise
// `invalid JSON request: ` and protobuf's complaint with every byte outside printable
// ASCII escaped (see EscapeForMessage). Never throws.
std::string RlsJsonParseErrorMessage(std::string_view body, absl::string_view parser_message);

// `text`, a client's string, as a JSON string literal for a message (`"a\u0001b"`): at most
// 64 bytes of it (cut on a character boundary, then `...`), every control character and
// non-ASCII character as a \u escape, invalid UTF-8 as \ufffd. The result is printable ASCII.
std::string QuoteForMessage(absl::string_view text);

// `value`, a client's JSON value, compactly for a message, as QuoteForMessage shows a string:
// printable ASCII only, at most 64 bytes then `...`.
std::string ShowForMessage(const nlohmann::json& value);

// `text` with every byte outside printable ASCII written as `\xNN`, and cut to `max_bytes`
// (then `...`): for a library's message that may quote its input.
std::string EscapeForMessage(absl::string_view text, size_t max_bytes = 200);

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_JSON_ERRORS_H_
