// Copyright tollgate authors. The ids of reservations and leases, and a reservation's token.
//
// An id is 128 bits from the kernel's CSPRNG (getrandom), written as 22 URL-safe base64
// characters: what makes a reservation or a lease impossible to guess, and so impossible to
// settle or release for anyone but its holder. The store keeps the id (a record per
// reservation, a member of the lease set); nothing else is secret.
//
// A reservation's token names what a settle needs, since `POST /v1/settle` carries only the
// token and the actual cost: `<id>.<limit name>.<key>`, the last two in URL-safe base64
// (no padding). A token whose id the store does not hold is refused there (kNotFound).
#ifndef TOLLGATE_SRC_CORE_METERED_IDS_H_
#define TOLLGATE_SRC_CORE_METERED_IDS_H_

#include <optional>
#include <string>
#include <string_view>

namespace tollgate::internal {

// A fresh id: 22 characters of [A-Za-z0-9_-]. Thread-safe.
std::string NewMeteredId();

// Whether `id` has the shape NewMeteredId gives (a quick refusal of what cannot be one).
bool IsMeteredId(std::string_view id);

struct ReservationParts {
  std::string id;
  std::string limit;
  std::string key;
};

// The token of reservation `id` of `limit` for `key`.
std::string ReservationToken(std::string_view id, std::string_view limit, std::string_view key);

// The parts of a token ReservationToken made; nullopt for anything else (not three parts,
// not base64, an id of the wrong shape, an empty limit or key).
std::optional<ReservationParts> ParseReservationToken(std::string_view token);

}  // namespace tollgate::internal

#endif  // TOLLGATE_SRC_CORE_METERED_IDS_H_
