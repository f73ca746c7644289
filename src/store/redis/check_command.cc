// Copyright tollgate authors.
#include "src/store/redis/check_command.h"

#include <cstring>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "src/store/redis/resp.h"
#include "src/store/redis/script_args.h"

namespace tollgate::redis {
namespace {

// A spec's bytes (EncodeItem) and the id that follows them, if any.
struct Spec {
  ItemBytes bytes;
  std::string_view id;
  bool operator==(const Spec& other) const {
    return bytes.size == other.bytes.size && id == other.id &&
           std::memcmp(bytes.data, other.bytes.data, bytes.size) == 0;
  }
};

Spec SpecOf(const CheckItem& item) {
  Spec spec{EncodeItem(item, std::nullopt, item.shadow, /*with_op=*/true), {}};
  if (spec.bytes.then_id) spec.id = item.id;
  return spec;
}

void AddSpec(CommandWriter& writer, const Spec& spec) {
  if (spec.id.empty()) {
    writer.Add(spec.bytes.view());
  } else {
    writer.AddConcatenation({spec.bytes.view(), spec.id});
  }
}

// The key argument of `item`: its state key, or for a lease request its lease set's.
void AddKey(CommandWriter& writer, std::string_view prefix, const CheckItem& item, bool lease) {
  writer.AddConcatenation(
      {prefix, item.limit->name, ":{", item.key, lease ? "}:l" : std::string_view("}")});
}

void AddTime(CommandWriter& writer, std::optional<int64_t> now_micros) {
  if (now_micros.has_value()) {
    writer.AddInteger(*now_micros);
  } else {
    writer.Add("");
  }
}

size_t KeyBytes(std::string_view prefix, const CheckItem& item) {
  return prefix.size() + item.limit->name.size() + item.key.size() + 16;
}

bool IsPlain(const CheckItem& item) {
  return item.op == ItemOp::kCheck && item.id.empty() && !item.shadow &&
         item.limit->numbers.algorithm != Algorithm::kConcurrency;
}

}  // namespace

RequestKind KindOf(const std::vector<CheckItem>& items) {
  if (items.size() == 1 && !items[0].shadow &&
      items[0].limit->numbers.algorithm == Algorithm::kConcurrency &&
      ((items[0].op == ItemOp::kCheck && !items[0].id.empty()) ||
       items[0].op == ItemOp::kRelease)) {
    return RequestKind::kLease;
  }
  for (const CheckItem& item : items) {
    if (!IsPlain(item)) return RequestKind::kGeneral;
  }
  return RequestKind::kPlain;
}

absl::Status ValidateRequest(const std::vector<CheckItem>& items) {
  if (items.empty()) return absl::InvalidArgumentError("a check needs at least one item");
  for (const CheckItem& item : items) {
    if (item.limit == nullptr) return absl::InvalidArgumentError("a check item without a limit");
    const Limit& limit = *item.limit;
    auto wrong = [&limit](const std::string& what) {
      return absl::InvalidArgumentError(absl::StrCat("limit '", limit.name, "': ", what));
    };
    if (absl::Status valid = ValidateLimit(limit); !valid.ok()) return valid;
    if (item.key.empty()) return wrong("an empty key");
    if (item.cost < 0) return wrong(absl::StrCat("a negative cost (", item.cost, ")"));
    const bool concurrency = limit.numbers.algorithm == Algorithm::kConcurrency;
    switch (item.op) {
      case ItemOp::kAdd:
        return wrong("kAdd items go in a batch of their own");
      case ItemOp::kCheck:
        if (concurrency && item.cost == 1 && item.id.empty()) return wrong("a lease needs an id");
        break;
      case ItemOp::kRelease:
      case ItemOp::kRenew:
        if (!concurrency) return wrong("not a concurrency limit: it holds no leases");
        if (item.id.empty()) return wrong("a lease needs an id");
        break;
      case ItemOp::kCharge:
      case ItemOp::kReserve:
      case ItemOp::kSettle:
        if (concurrency) return wrong("a concurrency limit takes leases, not charges");
        if (item.op != ItemOp::kCharge && item.id.empty())
          return wrong("a reservation needs an id");
        break;
    }
  }
  return absl::OkStatus();
}

bool FitsOneCall(absl::Span<const std::vector<CheckItem>* const> requests) {
  if (requests.size() <= 1) return true;
  if (requests.size() > kMaxRequestsPerCall) return false;
  size_t items = 0;
  for (const std::vector<CheckItem>* request : requests) items += request->size();
  return items <= kMaxItemsPerCall;
}

std::string CheckCommand(std::string_view verb, std::string_view script, std::string_view prefix,
                         absl::Span<const std::vector<CheckItem>* const> requests,
                         std::optional<int64_t> now_micros) {
  if (requests.size() == 1) {
    const std::vector<CheckItem>& items = *requests[0];
    const bool lease = KindOf(items) == RequestKind::kLease;
    size_t bytes = 64 + script.size();
    for (const CheckItem& item : items) bytes += 2 * KeyBytes(prefix, item) + 64 + item.id.size();
    CommandWriter writer(4 + 2 * items.size(), bytes);
    writer.Add(verb);
    writer.Add(script);
    writer.AddInteger(static_cast<int64_t>(items.size()));
    for (const CheckItem& item : items) AddKey(writer, prefix, item, lease);
    AddTime(writer, now_micros);
    for (const CheckItem& item : items) AddSpec(writer, SpecOf(item));
    return std::move(writer).Finish();
  }

  // The batch form: each distinct spec once, and the layout that names them, 'D' first while
  // every request is plain checks and no state key comes twice (check.lua's header).
  absl::InlinedVector<Spec, 4> specs;
  std::string layout = "D";
  layout.reserve(1 + 3 * requests.size());
  bool distinct = true;
  absl::flat_hash_set<std::pair<std::string_view, std::string_view>> limit_keys;
  limit_keys.reserve(requests.size());
  size_t items = 0;
  size_t bytes = 96 + script.size();
  size_t run = std::string::npos;  // where the run being extended starts in `layout`
  for (const std::vector<CheckItem>* request : requests) {
    const RequestKind kind = KindOf(*request);
    items += request->size();
    distinct = distinct && kind == RequestKind::kPlain;
    for (const CheckItem& item : *request) {
      if (!distinct) break;
      distinct = limit_keys.emplace(item.limit->name, item.key).second;
    }
    const size_t entry = layout.size();
    layout.push_back(static_cast<char>(kind));
    layout.push_back(static_cast<char>(request->size()));
    for (const CheckItem& item : *request) {
      bytes += KeyBytes(prefix, item) + item.id.size();
      Spec spec = SpecOf(item);
      size_t number = 0;
      while (number < specs.size() && !(specs[number] == spec)) ++number;
      if (number == specs.size()) {
        specs.push_back(spec);
        bytes += spec.bytes.size + spec.id.size() + 16;
      }
      layout.push_back(static_cast<char>(number + 1));
    }
    if (kind != RequestKind::kPlain || request->size() != 1) {
      run = std::string::npos;
      continue;
    }
    // One plain check: a run ('P', count, spec) of such requests with the same spec.
    if (run != std::string::npos && layout[run + 2] == layout[entry + 2] &&
        static_cast<unsigned char>(layout[run + 1]) < 255) {
      layout[run + 1] = static_cast<char>(static_cast<unsigned char>(layout[run + 1]) + 1);
      layout.resize(entry);
    } else {
      layout[entry] = 'P';
      run = entry;
    }
  }
  if (!distinct) layout.erase(0, 1);
  CommandWriter writer(5 + items + specs.size(), bytes + layout.size());
  writer.Add(verb);
  writer.Add(script);
  writer.AddInteger(static_cast<int64_t>(items));
  for (const std::vector<CheckItem>* request : requests) {
    const bool lease = KindOf(*request) == RequestKind::kLease;
    for (const CheckItem& item : *request) AddKey(writer, prefix, item, lease);
  }
  AddTime(writer, now_micros);
  writer.Add(layout);
  for (const Spec& spec : specs) AddSpec(writer, spec);
  return std::move(writer).Finish();
}

}  // namespace tollgate::redis
