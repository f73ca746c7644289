// Copyright tollgate authors.
#include "src/server/rls_request.h"

#include <climits>
#include <cstddef>
#include <optional>

#include "google/protobuf/stubs/common.h"
#include "src/server/protobuf_wire.h"

namespace tollgate::server {
namespace {

using protobuf_wire::kEndGroup;
using protobuf_wire::kFixed32;
using protobuf_wire::kFixed64;
using protobuf_wire::kLengthDelimited;
using protobuf_wire::kStartGroup;
using protobuf_wire::kVarint;
using protobuf_wire::Tag;

// Protobuf's parser's nesting bound (its default recursion limit).
constexpr int kMaxDepth = 100;

// Reads one message's bytes front to back, as protobuf's parser reads them.
class WireReader {
 public:
  explicit WireReader(std::string_view bytes) : at_(bytes.data()), end_(at_ + bytes.size()) {}

  bool AtEnd() const { return at_ == end_; }

  // A tag: at most 5 bytes, its value modulo 2^32.
  bool Tag(uint32_t* tag) { return VarintOf<5>(tag); }

  // A varint: at most 10 bytes, its value modulo 2^64.
  bool Varint(uint64_t* value) { return VarintOf<10>(value); }

  // A length-delimited field's bytes: the length in at most 5 bytes, below 2^31 - 16 (the
  // parser's bound), and within the bytes left.
  bool LengthDelimited(std::string_view* bytes) {
    uint64_t size = 0;
    if (!VarintOf<5>(&size) || size > INT_MAX - 16 || size > static_cast<uint64_t>(end_ - at_)) {
      return false;
    }
    *bytes = std::string_view(at_, size);
    at_ += size;
    return true;
  }

  bool Skip(size_t bytes) {
    if (bytes > static_cast<size_t>(end_ - at_)) return false;
    at_ += bytes;
    return true;
  }

 private:
  // A varint of at most `kMaxBytes` bytes into `*value`, its bits past the type's dropped.
  template <int kMaxBytes, typename Unsigned>
  bool VarintOf(Unsigned* value) {
    Unsigned result = 0;
    for (int i = 0; i < kMaxBytes && at_ != end_; ++i) {
      const auto byte = static_cast<uint8_t>(*at_++);
      result |= static_cast<Unsigned>(byte & 0x7f) << (7 * i);
      if (byte < 0x80) {
        *value = result;
        return true;
      }
    }
    return false;
  }

  const char* at_;
  const char* end_;
};

bool SkipField(WireReader& reader, uint32_t tag, int depth);

// The fields of a group opened by `start_tag`, through its end-group tag.
bool SkipGroup(WireReader& reader, uint32_t start_tag, int depth) {
  if (--depth < 0) return false;
  while (!reader.AtEnd()) {
    uint32_t tag = 0;
    if (!reader.Tag(&tag) || tag == 0) return false;
    if ((tag & 7) == kEndGroup) return tag == start_tag + 1;
    if (!SkipField(reader, tag, depth)) return false;
  }
  return false;  // never closed
}

// The value of a field not read, after its `tag`.
bool SkipField(WireReader& reader, uint32_t tag, int depth) {
  if ((tag >> 3) == 0) return false;  // field number 0
  std::string_view ignored_bytes;
  uint64_t ignored_value = 0;
  switch (tag & 7) {
    case kVarint:
      return reader.Varint(&ignored_value);
    case kFixed64:
      return reader.Skip(8);
    case kLengthDelimited:
      return reader.LengthDelimited(&ignored_bytes);
    case kStartGroup:
      return SkipGroup(reader, tag, depth);
    case kFixed32:
      return reader.Skip(4);
    default:  // an end-group tag out of place, or wire type 6 or 7
      return false;
  }
}

// Reads every field of one message (what `reader` holds, `depth` levels of nesting left),
// handing each to `field(tag, reader, depth)` (true: read, false: malformed, nullopt: not one
// it reads, skipped).
template <typename Field>
bool ReadFields(WireReader reader, int depth, Field field) {
  while (!reader.AtEnd()) {
    uint32_t tag = 0;
    if (!reader.Tag(&tag) || tag == 0 || (tag & 7) == kEndGroup) return false;
    const std::optional<bool> read = field(tag, reader, depth);
    if (read.has_value()) {
      if (!*read) return false;
    } else if (!SkipField(reader, tag, depth)) {
      return false;
    }
  }
  return true;
}

// A message field, after its tag, in a message with `depth` levels left: its own fields
// handed to `field` as ReadFields does, one level deeper.
template <typename Field>
bool ReadMessage(WireReader& reader, int depth, Field field) {
  std::string_view bytes;
  return depth >= 1 && reader.LengthDelimited(&bytes) &&
         ReadFields(WireReader(bytes), depth - 1, field);
}

// Whether `text` is valid UTF-8: ASCII at once (descriptors nearly always are), else as
// protobuf's parser checks it.
bool ValidUtf8(std::string_view text) {
  uint8_t high = 0;
  for (char c : text) high |= static_cast<uint8_t>(c);
  return high < 0x80 || google::protobuf::internal::IsStructurallyValidUTF8(
                            text.data(), static_cast<int>(text.size()));
}

// A proto3 string field's value.
bool ReadString(WireReader& reader, std::string_view* value) {
  return reader.LengthDelimited(value) && ValidUtf8(*value);
}

// A varint field's value into `*field`, truncated to its type as protobuf's parser does.
template <typename Field>
bool ReadVarint(WireReader& reader, Field* field) {
  uint64_t value = 0;
  if (!reader.Varint(&value)) return false;
  *field = static_cast<Field>(value);
  return true;
}

// RateLimitDescriptor's fields, into `descriptor`.
auto DescriptorFields(RlsDescriptorView* descriptor) {
  return [descriptor](uint32_t tag, WireReader& reader, int depth) -> std::optional<bool> {
    switch (tag) {
      case Tag(1, kLengthDelimited): {  // entries
        DescriptorEntry& entry = descriptor->entries.emplace_back();
        return ReadMessage(
            reader, depth,
            [&entry](uint32_t entry_tag, WireReader& in, int) -> std::optional<bool> {
              switch (entry_tag) {
                case Tag(1, kLengthDelimited):
                  return ReadString(in, &entry.key);
                case Tag(2, kLengthDelimited):
                  return ReadString(in, &entry.value);
                default:
                  return std::nullopt;
              }
            });
      }
      case Tag(2, kLengthDelimited):  // limit (RateLimitOverride), merged
        descriptor->has_limit = true;
        return ReadMessage(
            reader, depth,
            [descriptor](uint32_t limit_tag, WireReader& in, int) -> std::optional<bool> {
              switch (limit_tag) {
                case Tag(1, kVarint):
                  return ReadVarint(in, &descriptor->requests_per_unit);
                case Tag(2, kVarint):
                  return ReadVarint(in, &descriptor->unit);
                default:
                  return std::nullopt;
              }
            });
      case Tag(3, kLengthDelimited):  // hits_addend (UInt64Value), merged
        descriptor->has_hits_addend = true;
        return ReadMessage(
            reader, depth,
            [descriptor](uint32_t hits_tag, WireReader& in, int) -> std::optional<bool> {
              if (hits_tag != Tag(1, kVarint)) return std::nullopt;
              return ReadVarint(in, &descriptor->hits_addend);
            });
      default:
        return std::nullopt;
    }
  };
}

}  // namespace

bool operator==(const RlsDescriptorView& a, const RlsDescriptorView& b) {
  if (a.entries.size() != b.entries.size()) return false;
  for (size_t i = 0; i < a.entries.size(); ++i) {
    if (a.entries[i].key != b.entries[i].key || a.entries[i].value != b.entries[i].value) {
      return false;
    }
  }
  return a.has_limit == b.has_limit && a.requests_per_unit == b.requests_per_unit &&
         a.unit == b.unit && a.has_hits_addend == b.has_hits_addend &&
         a.hits_addend == b.hits_addend;
}

bool operator==(const RateLimitRequestView& a, const RateLimitRequestView& b) {
  return a.domain == b.domain && a.hits_addend == b.hits_addend && a.descriptors == b.descriptors;
}

RateLimitRequestView RateLimitRequestView::Of(
    const envoy::service::ratelimit::v3::RateLimitRequest& request) {
  RateLimitRequestView view;
  view.domain = request.domain();
  view.hits_addend = request.hits_addend();
  view.descriptors.resize(static_cast<size_t>(request.descriptors_size()));
  for (int i = 0; i < request.descriptors_size(); ++i) {
    const auto& descriptor = request.descriptors(i);
    RlsDescriptorView& out = view.descriptors[static_cast<size_t>(i)];
    for (const auto& entry : descriptor.entries()) {
      out.entries.push_back(DescriptorEntry{entry.key(), entry.value()});
    }
    out.has_limit = descriptor.has_limit();
    out.requests_per_unit = descriptor.limit().requests_per_unit();
    out.unit = descriptor.limit().unit();
    out.has_hits_addend = descriptor.has_hits_addend();
    out.hits_addend = descriptor.hits_addend().value();
  }
  return view;
}

bool ReadRateLimitRequest(std::string_view bytes, RateLimitRequestView* out) {
  return ReadFields(WireReader(bytes), kMaxDepth,
                    [out](uint32_t tag, WireReader& reader, int depth) -> std::optional<bool> {
                      switch (tag) {
                        case Tag(1, kLengthDelimited):
                          return ReadString(reader, &out->domain);
                        case Tag(2, kLengthDelimited):
                          return ReadMessage(reader, depth,
                                             DescriptorFields(&out->descriptors.emplace_back()));
                        case Tag(3, kVarint):
                          return ReadVarint(reader, &out->hits_addend);
                        default:
                          return std::nullopt;
                      }
                    });
}

}  // namespace tollgate::server
