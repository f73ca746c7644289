# gRPC: the .proto files under proto/ (Envoy's rate-limit service API, the Aggregated Discovery
# Service and the RateLimitConfig resource, written for tollgate with Envoy's package, names and
# field numbers; grpc.health.v1) compiled by protoc and grpc_cpp_plugin into the build tree:
#   tollgate_proto  the messages (protobuf). The server layer links them: its gRPC server is
#                   ours (src/server/grpc_server.h, on libnghttp2).
#   tollgate_grpc   the grpc++ stubs. The xDS client (src/xds/) streams its config with gRPC
#                   C++'s client, so the tollgate binary links it; tests and benchmarks use it
#                   for their clients and servers.
# gRPC C++ (libgrpc++-dev, protobuf-compiler-grpc) is therefore required by every build.
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)

set(TOLLGATE_PROTO_DIR ${CMAKE_CURRENT_SOURCE_DIR}/proto)
set(TOLLGATE_PROTO_OUT ${CMAKE_CURRENT_BINARY_DIR}/generated/proto)
file(GLOB_RECURSE TOLLGATE_PROTOS CONFIGURE_DEPENDS ${TOLLGATE_PROTO_DIR}/*.proto)
file(MAKE_DIRECTORY ${TOLLGATE_PROTO_OUT})

set(TOLLGATE_PROTO_SOURCES)  # messages: *.pb.cc
set(TOLLGATE_GRPC_SOURCES)   # grpc++ stubs and services: *.grpc.pb.cc
foreach(proto ${TOLLGATE_PROTOS})
  file(RELATIVE_PATH relative ${TOLLGATE_PROTO_DIR} ${proto})
  string(REGEX REPLACE "\\.proto$" "" stem ${relative})
  set(messages ${TOLLGATE_PROTO_OUT}/${stem}.pb.cc ${TOLLGATE_PROTO_OUT}/${stem}.pb.h)
  set(stubs ${TOLLGATE_PROTO_OUT}/${stem}.grpc.pb.cc ${TOLLGATE_PROTO_OUT}/${stem}.grpc.pb.h)
  add_custom_command(OUTPUT ${messages} ${stubs}
    COMMAND protobuf::protoc
            --proto_path=${TOLLGATE_PROTO_DIR} --proto_path=${Protobuf_INCLUDE_DIRS}
            --cpp_out=${TOLLGATE_PROTO_OUT} --grpc_out=${TOLLGATE_PROTO_OUT}
            --plugin=protoc-gen-grpc=$<TARGET_FILE:gRPC::grpc_cpp_plugin>
            ${proto}
    DEPENDS ${proto} ${TOLLGATE_PROTOS} protobuf::protoc gRPC::grpc_cpp_plugin
    COMMENT "protoc ${relative}"
    VERBATIM)
  list(APPEND TOLLGATE_GRPC_SOURCES ${stubs})
  list(APPEND TOLLGATE_PROTO_SOURCES ${messages})
endforeach()

# The messages alone (protobuf, no gRPC library): what the server links. Its gRPC is ours
# (src/server/grpc_server.h, on libnghttp2).
add_library(tollgate_proto STATIC ${TOLLGATE_PROTO_SOURCES})
# Generated code: no warnings of ours to fix there.
target_compile_options(tollgate_proto PRIVATE -w)
target_include_directories(tollgate_proto SYSTEM PUBLIC ${TOLLGATE_PROTO_OUT})
target_link_libraries(tollgate_proto PUBLIC protobuf::libprotobuf)

# The grpc++ stubs: the xDS client's (linked into the tollgate binary through tollgate_xds),
# and the tests' and benchmarks' clients and servers.
add_library(tollgate_grpc STATIC ${TOLLGATE_GRPC_SOURCES})
target_compile_options(tollgate_grpc PRIVATE -w)
target_link_libraries(tollgate_grpc PUBLIC tollgate_proto gRPC::grpc++)
