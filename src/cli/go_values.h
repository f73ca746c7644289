// Copyright tollgate authors. Values written as envoyproxy/ratelimit's environment takes them:
// the forms of Go's strconv and time packages, as its settings library (envconfig) parses
// them, so that a value the peer accepts is accepted here and means the same.
#ifndef TOLLGATE_SRC_CLI_GO_VALUES_H_
#define TOLLGATE_SRC_CLI_GO_VALUES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tollgate::cli {

// Go's strconv.ParseBool: 1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False.
// nullopt for anything else.
std::optional<bool> ParseGoBool(std::string_view text);

// Go's time.ParseDuration: a sequence of decimal numbers with units ns, us (or µs), ms, s,
// m, h, such as "300ms", "1.5h" or "2h45m", optionally signed; "0" alone is zero. In
// microseconds, truncated. nullopt for anything else, or beyond ±2^63 ns.
std::optional<int64_t> ParseGoDurationMicros(std::string_view text);

// A base-10 integer with an optional sign, as Go's strconv.ParseInt(text, 0, 64) reads
// decimal input. nullopt for anything else (including empty text and overflow).
std::optional<int64_t> ParseGoInt(std::string_view text);

// A decimal floating-point number (strconv.ParseFloat's decimal forms). nullopt otherwise,
// and for infinities and NaN.
std::optional<double> ParseGoFloat(std::string_view text);

// envconfig's map form "k1:v1,k2:v2" (each pair split at its first ':'). An empty text is
// an empty map. nullopt when a pair has no ':' .
std::optional<std::vector<std::pair<std::string, std::string>>> ParseGoMap(std::string_view text);

}  // namespace tollgate::cli

#endif  // TOLLGATE_SRC_CLI_GO_VALUES_H_
