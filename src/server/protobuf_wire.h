// Copyright tollgate authors. Protocol Buffers' wire format as the gRPC service reads and
// writes it by hand: the wire types and a field's tag. src/server/rls_request.cc reads
// Envoy's request with them and src/server/rls_plan.cc writes the response.
#ifndef TOLLGATE_SRC_SERVER_PROTOBUF_WIRE_H_
#define TOLLGATE_SRC_SERVER_PROTOBUF_WIRE_H_

#include <cstdint>

namespace tollgate::server::protobuf_wire {

inline constexpr uint32_t kVarint = 0;
inline constexpr uint32_t kFixed64 = 1;
inline constexpr uint32_t kLengthDelimited = 2;
inline constexpr uint32_t kStartGroup = 3;
inline constexpr uint32_t kEndGroup = 4;
inline constexpr uint32_t kFixed32 = 5;

// Field `field`'s tag with `wire_type` (one byte below field 16).
constexpr uint32_t Tag(uint32_t field, uint32_t wire_type) { return field << 3 | wire_type; }

}  // namespace tollgate::server::protobuf_wire

#endif  // TOLLGATE_SRC_SERVER_PROTOBUF_WIRE_H_
