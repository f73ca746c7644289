// Copyright tollgate authors. Appending the pieces of an answer (the JSON body of a decision,
// the RateLimit fields, the status line) to the string being built: text, and integers in
// decimal, in one resize per call and with no temporary string.
#ifndef TOLLGATE_SRC_SERVER_TEXT_APPEND_H_
#define TOLLGATE_SRC_SERVER_TEXT_APPEND_H_

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

namespace tollgate::server {

namespace text_append_internal {

// One piece as text: a view of it, or its digits.
struct Digits {
  char text[20];  // "-9223372036854775808"
  size_t size;
};

template <typename Piece>
auto AsText(const Piece& piece) {
  static_assert(!std::is_same_v<Piece, bool> && !std::is_same_v<Piece, char>,
                "a bool or a char piece: is it a number or text?");
  if constexpr (std::is_integral_v<Piece>) {
    Digits digits;
    digits.size = static_cast<size_t>(
        std::to_chars(digits.text, digits.text + sizeof(digits.text), static_cast<int64_t>(piece))
            .ptr -
        digits.text);
    return digits;
  } else {
    return std::string_view(piece);
  }
}

inline size_t SizeOf(const Digits& digits) { return digits.size; }
inline size_t SizeOf(std::string_view text) { return text.size(); }
inline char* Put(char* at, const Digits& digits) {
  std::memcpy(at, digits.text, digits.size);
  return at + digits.size;
}
inline char* Put(char* at, std::string_view text) {
  if (text.empty()) return at;  // an empty view may have no data() at all
  std::memcpy(at, text.data(), text.size());
  return at + text.size();
}

template <typename... Texts>
void AppendTexts(std::string& out, const Texts&... texts) {
  const size_t at = out.size();
  out.resize(at + (SizeOf(texts) + ...));
  char* cursor = out.data() + at;
  ((cursor = Put(cursor, texts)), ...);
}

}  // namespace text_append_internal

// Appends every piece in order, growing `out` once: text (anything a std::string_view is made
// from) and integers in decimal, as absl::StrAppend writes them. REQUIRES: an unsigned piece
// fits in an int64_t. A char or a bool piece does not compile (a number, or text?).
template <typename... Pieces>
void AppendPieces(std::string& out, const Pieces&... pieces) {
  text_append_internal::AppendTexts(out, text_append_internal::AsText(pieces)...);
}

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_TEXT_APPEND_H_
