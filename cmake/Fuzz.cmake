# Fuzz targets: fuzz/<name>_fuzz.cc each define LLVMFuzzerTestOneInput.
#
# TOLLGATE_FUZZ=ON (clang++, `make fuzz`): each target links libFuzzer's main
# (-fsanitize=fuzzer); configure with -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link and
# TOLLGATE_SANITIZE=ON so the library is coverage-instrumented and checked too.
# Otherwise, with tests on (`make test`, any compiler): each target links
# fuzz/replay_main.cc, and CTest runs it once over every file of fuzz/corpus/<name>/
# (`<name>_corpus`, seconds), so the corpora and every crash found are regression tests.
option(TOLLGATE_FUZZ "Build the fuzz targets with libFuzzer (clang++ only)" OFF)

file(GLOB TOLLGATE_FUZZ_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/fuzz/*_fuzz.cc)
if(TOLLGATE_FUZZ)
  add_custom_target(fuzz_targets)
endif()
foreach(fuzz_source ${TOLLGATE_FUZZ_SOURCES})
  get_filename_component(name ${fuzz_source} NAME_WE)
  if(TOLLGATE_FUZZ)
    add_executable(${name} ${fuzz_source})
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
    add_dependencies(fuzz_targets ${name})
  elseif(TOLLGATE_BUILD_TESTS)
    add_executable(${name} ${fuzz_source} ${CMAKE_SOURCE_DIR}/fuzz/replay_main.cc)
    add_test(NAME ${name}_corpus COMMAND ${name} ${CMAKE_SOURCE_DIR}/fuzz/corpus/${name})
    set_tests_properties(${name}_corpus PROPERTIES TIMEOUT 300)
  else()
    continue()
  endif()
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR})
  # Every target reads what the server layer does (HTTP bodies, gRPC frames, RLS requests,
  # configs built into a descriptor matcher), so links it with the library.
  target_link_libraries(${name} PRIVATE tollgate tollgate_server absl::strings)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
endforeach()
