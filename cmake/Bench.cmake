# Benchmarks. Included when TOLLGATE_BUILD_BENCH or TOLLGATE_BUILD_TESTS is on: the tests'
# build needs compare_driver, grpc_load, http_load and the floor servers for the harness smoke
# test (tests/bench_harness_test.sh); the Google Benchmark targets only with
# TOLLGATE_BUILD_BENCH.

# The side-by-side driver (plain main, JSON on stdout), for bench/compare.py.
add_executable(compare_driver ${CMAKE_SOURCE_DIR}/bench/compare_driver.cc)
target_include_directories(compare_driver PRIVATE ${CMAKE_SOURCE_DIR})
target_link_libraries(compare_driver PRIVATE tollgate Boost::headers absl::strings
  absl::synchronization Threads::Threads)
set_target_properties(compare_driver PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)

# The gRPC load generator (Envoy's rate-limit API); bench/service_bench.sh and bench/compare.py
# (whose smoke test runs in the tests' build) drive it.
add_executable(grpc_load ${CMAKE_SOURCE_DIR}/bench/grpc_load.cc)
target_link_libraries(grpc_load PRIVATE tollgate_grpc absl::synchronization)
set_target_properties(grpc_load PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)

# The HTTP/1.1 keep-alive load generator (closed loop or paced) of bench/service_bench.sh.
add_executable(http_load ${CMAKE_SOURCE_DIR}/bench/http_load.cc)
target_link_libraries(http_load PRIVATE Boost::headers Threads::Threads)
set_target_properties(http_load PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)

# The floors under bench/service_bench.sh's rows (bench/floor_server.h): a minimal unary gRPC
# server on libnghttp2 answering OK, and a minimal HTTP/1.1 server answering 200; either
# passes each request through one Redis round trip with --redis.
pkg_check_modules(TOLLGATE_BENCH_NGHTTP2 REQUIRED IMPORTED_TARGET libnghttp2)
add_executable(h2_floor_server ${CMAKE_SOURCE_DIR}/bench/h2_floor_server.cc)
target_link_libraries(h2_floor_server PRIVATE tollgate_grpc PkgConfig::TOLLGATE_BENCH_NGHTTP2
  Threads::Threads)
add_executable(http_floor_server ${CMAKE_SOURCE_DIR}/bench/http_floor_server.cc)
target_link_libraries(http_floor_server PRIVATE Threads::Threads)
foreach(floor h2_floor_server http_floor_server)
  target_include_directories(${floor} PRIVATE ${CMAKE_SOURCE_DIR})
  if(TARGET PkgConfig::TOLLGATE_MALLOC_LIB)  # the malloc of `tollgate serve`, for a fair floor
    target_link_libraries(${floor} PRIVATE PkgConfig::TOLLGATE_MALLOC_LIB)
  endif()
  set_target_properties(${floor} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
endforeach()

# The light gRPC load generator of bench/service_bench.sh: ShouldRateLimit over libnghttp2 in
# one thread (Envoy's client is an HTTP/2 codec, not gRPC C++).
add_executable(h2_load ${CMAKE_SOURCE_DIR}/bench/h2_load.cc)
target_link_libraries(h2_load PRIVATE tollgate_grpc Boost::headers
  PkgConfig::TOLLGATE_BENCH_NGHTTP2 Threads::Threads)
set_target_properties(h2_load PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)

if(NOT TOLLGATE_BUILD_BENCH)
  return()
endif()

# The Rate Limit Quota Service's load (E Envoys x B buckets, grpc++ streams), for
# bench/rlqs_bench.sh.
add_executable(rlqs_load ${CMAKE_SOURCE_DIR}/bench/rlqs_load.cc)
target_include_directories(rlqs_load PRIVATE ${CMAKE_SOURCE_DIR})
target_link_libraries(rlqs_load PRIVATE tollgate_grpc absl::synchronization)
set_target_properties(rlqs_load PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)

# A minimal ShouldRateLimit server per gRPC server API (callback, async, sync) that answers OK
# at once: gRPC's own cost per call, for bench/grpc_floor.sh.
add_executable(grpc_floor_server ${CMAKE_SOURCE_DIR}/bench/grpc_floor_server.cc)
target_link_libraries(grpc_floor_server PRIVATE tollgate_grpc absl::synchronization)
if(TARGET PkgConfig::TOLLGATE_MALLOC_LIB)  # the malloc of `tollgate serve`, for a fair floor
  target_link_libraries(grpc_floor_server PRIVATE PkgConfig::TOLLGATE_MALLOC_LIB)
endif()
set_target_properties(grpc_floor_server PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)

# Google Benchmark targets: bench/<name>.cc -> build/bench/<name>. Those without a main() of
# their own (BENCHMARK_MAIN or a plain one) get bench/benchmark_main.cc.
file(GLOB bench_sources CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/bench/*_bench.cc)
foreach(bench_source ${bench_sources})
  get_filename_component(name ${bench_source} NAME_WE)
  file(STRINGS ${bench_source} own_main REGEX "^(int main\\(|BENCHMARK_MAIN\\(\\))")
  if(own_main)
    add_executable(${name} ${bench_source})
  else()
    add_executable(${name} ${bench_source} ${CMAKE_SOURCE_DIR}/bench/benchmark_main.cc)
  endif()
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR})
  target_link_libraries(${name} PRIVATE tollgate tollgate_server tollgate_fault_proxy
    benchmark::benchmark)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
endforeach()
