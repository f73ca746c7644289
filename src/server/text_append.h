// Copyright tollgate authors. Appending the pieces of an answer (the JSON body of a decision,
// the RateLimit fields) to the string being built: text, and integers in decimal written
// in place, with no temporary string.
#ifndef TOLLGATE_SRC_SERVER_TEXT_APPEND_H_
#define TOLLGATE_SRC_SERVER_TEXT_APPEND_H_

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

namespace tollgate::server {

// Appends `value` in decimal, as absl::StrAppend would.
inline void AppendInt(std::string& out, int64_t value) {
  char digits[20];  // "-9223372036854775808"
  const char* end = std::to_chars(digits, digits + sizeof(digits), value).ptr;
  out.append(digits, static_cast<size_t>(end - digits));
}

// Appends every piece in order: text (anything a std::string_view is made from) and
// integers in decimal. A char or a bool is refused at compile time (is it a number?).
template <typename... Pieces>
void AppendPieces(std::string& out, const Pieces&... pieces) {
  auto one = [&out](const auto& piece) {
    using Piece = std::decay_t<decltype(piece)>;
    static_assert(!std::is_same_v<Piece, bool> && !std::is_same_v<Piece, char>);
    if constexpr (std::is_integral_v<Piece>) {
      AppendInt(out, static_cast<int64_t>(piece));
    } else {
      out.append(std::string_view(piece));
    }
  };
  (one(pieces), ...);
}

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_TEXT_APPEND_H_
