include(GoogleTest)

# Test helpers shared by tests that start real servers (tests/support/).
# (fault_proxy.cc is its own library, tollgate_fault_proxy, which benchmarks use too; so is
# rlqs_envoy.cc, tollgate_rlqs_envoy, which the demo uses.)
file(GLOB TOLLGATE_TEST_SUPPORT_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/support/*.cc)
list(FILTER TOLLGATE_TEST_SUPPORT_SOURCES EXCLUDE REGEX "/(fault_proxy|rlqs_envoy)\\.cc$")
add_library(tollgate_test_support STATIC ${TOLLGATE_TEST_SUPPORT_SOURCES})
target_include_directories(tollgate_test_support PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(tollgate_test_support PUBLIC tollgate tollgate_server tollgate_rlqs tollgate_xds tollgate_grpc
  tollgate_fault_proxy tollgate_rlqs_envoy GTest::gtest GTest::gmock
  absl::strings absl::time)
target_compile_definitions(tollgate_test_support PUBLIC
  TOLLGATE_BINARY="$<TARGET_FILE:tollgate_cli>"
  TOLLGATE_SOURCE_DIR="${CMAKE_SOURCE_DIR}")

# Every test runs with tests/lsan.supp (third-party per-thread state freed at thread exit).
set(TOLLGATE_TEST_ENVIRONMENT "LSAN_OPTIONS=suppressions=${CMAKE_SOURCE_DIR}/tests/lsan.supp")

# Unit tests: one binary per folder under src/, from the *_test.cc files beside the code.
foreach(dir core algorithm store/memory store/redis store/sync limiter resilience fleet config server rlqs xds cli)
  file(GLOB tests CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/${dir}/*_test.cc)
  if(tests)
    string(REPLACE "/" "_" name ${dir})
    add_executable(${name}_test ${tests})
    target_include_directories(${name}_test PRIVATE ${CMAKE_SOURCE_DIR})
    target_link_libraries(${name}_test PRIVATE tollgate_test_support GTest::gtest_main)
    set(environment "${TOLLGATE_TEST_ENVIRONMENT}")
    if(dir STREQUAL "xds")
      # The xDS client's TLS handshakes run on gRPC's pool threads, whose OpenSSL state
      # tests/lsan.supp names by the function that allocated it: found only by unwinding
      # through libcrypto, which keeps no frame pointers, so not by the fast unwinder (it stops
      # at CRYPTO_zalloc). Not for every test: the slow unwinder slows the servers that the
      # flood tests time.
      set(environment "${environment}:fast_unwind_on_malloc=0")
    endif()
    gtest_discover_tests(${name}_test DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 60
      PROPERTIES TIMEOUT 600 ENVIRONMENT "${environment}")
  endif()
endforeach()

# Tests against real servers (redis-server, tollgate serve): one binary per file in tests/.
file(GLOB integration_tests CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/*_test.cc)
foreach(test_source ${integration_tests})
  get_filename_component(name ${test_source} NAME_WE)
  add_executable(${name} ${test_source})
  target_link_libraries(${name} PRIVATE tollgate_test_support GTest::gtest_main)
  add_dependencies(${name} tollgate_cli)
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 60
    PROPERTIES TIMEOUT 900 ENVIRONMENT "${TOLLGATE_TEST_ENVIRONMENT}")
endforeach()

# Shell-driven tests (tests/*_test.sh): run with the build directory as $1.
file(GLOB script_tests CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/*_test.sh)
# TOLLGATE_SANITIZED tells them whether the binaries are sanitized (GCC links the runtime as a
# shared library, clang into each executable: ldd cannot tell).
if(TOLLGATE_SANITIZE)
  set(sanitized 1)
else()
  set(sanitized 0)
endif()
foreach(test_script ${script_tests})
  get_filename_component(name ${test_script} NAME_WE)
  add_test(NAME ${name} COMMAND bash ${test_script} ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
  # Exit 77: skipped (a script that cannot run here says why).
  set_tests_properties(${name} PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77
    ENVIRONMENT "${TOLLGATE_TEST_ENVIRONMENT};TOLLGATE_SANITIZED=${sanitized}")
endforeach()

# src/cli/*_test.cc test the binary's subcommands (the cli layer's library).
if(TARGET cli_test)
  target_link_libraries(cli_test PRIVATE tollgate_commands)
endif()
