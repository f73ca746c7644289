// Copyright tollgate authors.
#include "src/store/memory/record.h"

#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace tollgate::memory {
namespace {

template <size_t... I>
AnyState LoadState(size_t index, const unsigned char* bytes, std::index_sequence<I...>) {
  AnyState state;
  // The alternative numbered `index`, from its bytes.
  (void)((index == I &&
          (std::memcpy(&state.emplace<I>(), bytes, sizeof(std::variant_alternative_t<I, AnyState>)),
           true)) ||
         ...);
  return state;
}

std::string Concatenate(std::string_view name, std::string_view key) {
  std::string bytes;
  bytes.reserve(name.size() + key.size());
  bytes.append(name).append(key);
  return bytes;
}

}  // namespace

Record::Record(const KeyView& key, const AnyState& state, int64_t expires_at_micros)
    : expires_at_micros(expires_at_micros) {
  std::memset(state_, 0, sizeof(state_));
  std::memset(bytes_, 0, sizeof(bytes_));
  set_state(state);
  if (key.name.size() + key.key.size() <= kInlineBytes) {
    name_size_ = static_cast<uint8_t>(key.name.size());
    key_size_ = static_cast<uint8_t>(key.key.size());
    std::memcpy(bytes_, key.name.data(), key.name.size());
    std::memcpy(bytes_ + key.name.size(), key.key.data(), key.key.size());
  } else {
    const OnHeap heap{new char[key.name.size() + key.key.size()], key.name.size(), key.key.size()};
    std::memcpy(heap.bytes, key.name.data(), key.name.size());
    std::memcpy(heap.bytes + key.name.size(), key.key.data(), key.key.size());
    std::memcpy(bytes_, &heap, sizeof(heap));
    name_size_ = kOnHeap;
    key_size_ = 0;
  }
}

Record::Record(Record&& other) noexcept
    : expires_at_micros(other.expires_at_micros),
      state_index_(other.state_index_),
      name_size_(other.name_size_),
      key_size_(other.key_size_) {
  std::memcpy(state_, other.state_, sizeof(state_));
  std::memcpy(bytes_, other.bytes_, sizeof(bytes_));
  other.name_size_ = 0;  // `other` no longer owns a heap copy
}

Record::~Record() {
  if (name_size_ == kOnHeap) delete[] on_heap().bytes;
}

AnyState Record::state() const {
  return LoadState(state_index_ - 1, state_,
                   std::make_index_sequence<std::variant_size_v<AnyState>>());
}

void Record::set_state(const AnyState& state) {
  std::visit(
      [this](const auto& s) {
        using State = std::decay_t<decltype(s)>;
        static_assert(std::is_trivially_copyable_v<State> && sizeof(State) <= sizeof(state_));
        std::memcpy(state_, &s, sizeof(s));
      },
      state);
  state_index_ = static_cast<uint8_t>(state.index() + 1);
}

KeyCopy::KeyCopy(const KeyView& key)
    : bytes_(Concatenate(key.name, key.key)), name_size_(key.name.size()), hash_(key.hash) {}

}  // namespace tollgate::memory
