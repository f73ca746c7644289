// Copyright tollgate authors. Protocol Buffers' wire format as tollgate reads and writes it by
// hand: the wire types, a field's tag, and a writer for messages sized before they are
// written. src/server/otlp_encoding.cc writes the spans it exports with them.
#ifndef TOLLGATE_SRC_SERVER_PROTOBUF_WIRE_H_
#define TOLLGATE_SRC_SERVER_PROTOBUF_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace tollgate::server::protobuf_wire {

inline constexpr uint32_t kVarint = 0;
inline constexpr uint32_t kFixed64 = 1;
inline constexpr uint32_t kLengthDelimited = 2;
inline constexpr uint32_t kStartGroup = 3;
inline constexpr uint32_t kEndGroup = 4;
inline constexpr uint32_t kFixed32 = 5;

// Field `field`'s tag with `wire_type` (one byte below field 16).
constexpr uint32_t Tag(uint32_t field, uint32_t wire_type) { return field << 3 | wire_type; }

// Writing. A message is sized first, then written into exactly that room (Extend), so a
// length prefix is known before its message. The sizes below are those of fields numbered
// below 16 (one-byte tags), as WireCursor writes all but Fixed32Field.
inline size_t VarintSize(uint64_t value) {
  size_t size = 1;
  for (; value >= 0x80; value >>= 7) ++size;
  return size;
}
// A proto3 scalar: absent when 0.
inline size_t VarintFieldSize(uint64_t value) { return value == 0 ? 0 : 1 + VarintSize(value); }
inline size_t LengthDelimitedSize(size_t length) { return 1 + VarintSize(length) + length; }
// A proto3 string: absent when empty.
inline size_t StringFieldSize(std::string_view value) {
  return value.empty() ? 0 : LengthDelimitedSize(value.size());
}
// A fixed32 field of any number.
inline size_t Fixed32FieldSize(uint32_t field) { return VarintSize(Tag(field, kFixed32)) + 4; }

// Writes wire bytes from a cursor into room the caller sized exactly (Extend). Fields numbered
// below 16 but for Fixed32Field.
class WireCursor {
 public:
  explicit WireCursor(char* at) : at_(at) {}
  void Tagged(uint32_t field, uint32_t wire_type, uint64_t value) {
    *at_++ = static_cast<char>(Tag(field, wire_type));
    Varint(value);
  }
  void VarintField(uint32_t field, uint64_t value) {
    if (value != 0) Tagged(field, kVarint, value);
  }
  void LengthDelimited(uint32_t field, size_t length) { Tagged(field, kLengthDelimited, length); }
  // A proto3 string: absent when empty.
  void StringField(uint32_t field, std::string_view value) {
    if (value.empty()) return;
    LengthDelimited(field, value.size());
    Raw(value);
  }
  // A field of `bytes` or `string` written even when empty (a oneof member, an id).
  void BytesField(uint32_t field, std::string_view value) {
    LengthDelimited(field, value.size());
    Raw(value);
  }
  void Fixed64Field(uint32_t field, uint64_t value) {
    *at_++ = static_cast<char>(Tag(field, kFixed64));
    LittleEndian(value, 8);
  }
  void Fixed32Field(uint32_t field, uint32_t value) {
    Varint(Tag(field, kFixed32));
    LittleEndian(value, 4);
  }
  void Raw(std::string_view bytes) {
    std::memcpy(at_, bytes.data(), bytes.size());
    at_ += bytes.size();
  }
  const char* at() const { return at_; }

 private:
  void Varint(uint64_t value) {
    for (; value >= 0x80; value >>= 7) *at_++ = static_cast<char>((value & 0x7f) | 0x80);
    *at_++ = static_cast<char>(value);
  }
  void LittleEndian(uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i, value >>= 8) *at_++ = static_cast<char>(value & 0xff);
  }

  char* at_;
};

// `size` more bytes at the end of `out`, and a cursor at the first of them.
inline WireCursor Extend(std::string& out, size_t size) {
  const size_t old = out.size();
  out.resize(old + size);
  return WireCursor(out.data() + old);
}

}  // namespace tollgate::server::protobuf_wire

#endif  // TOLLGATE_SRC_SERVER_PROTOBUF_WIRE_H_
