# Google Benchmark targets: bench/<name>.cc -> build/bench/<name>.
file(GLOB bench_sources CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/bench/*_bench.cc)
foreach(bench_source ${bench_sources})
  get_filename_component(name ${bench_source} NAME_WE)
  add_executable(${name} ${bench_source})
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR})
  target_link_libraries(${name} PRIVATE tollgate_server benchmark::benchmark)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
endforeach()
