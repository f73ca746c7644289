// Copyright tollgate authors.
#include "tollgate/store.h"

#include <future>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tollgate {

absl::StatusOr<std::vector<Decision>> Store::Check(std::vector<CheckItem> items) {
  std::promise<absl::StatusOr<std::vector<Decision>>> promise;
  std::future<absl::StatusOr<std::vector<Decision>>> result = promise.get_future();
  CheckAsync(std::move(items), [&promise](absl::StatusOr<std::vector<Decision>> decisions) {
    promise.set_value(std::move(decisions));
  });
  return result.get();
}

// The interface takes ownership of the items, which this default does not need.
// NOLINTNEXTLINE(performance-unnecessary-value-param)
void Store::AddAsync(std::vector<CheckItem> /*items*/, AddCallback done) {
  std::move(done)(
      absl::UnimplementedError(absl::StrCat(std::string(Name()), " store cannot add consumption")));
}

}  // namespace tollgate
