# `cmake --install` puts the headers, the library layers' archives (libtollgate_core.a, ...)
# and a CMake package in place, so another project can `find_package(tollgate)` and link
# `tollgate::tollgate`, which brings every layer it needs.
include(CMakePackageConfigHelpers)
set(TOLLGATE_INSTALLED_TARGETS tollgate)
foreach(layer ${TOLLGATE_LIBRARY_LAYERS})
  list(APPEND TOLLGATE_INSTALLED_TARGETS tollgate_${layer})
endforeach()
install(TARGETS ${TOLLGATE_INSTALLED_TARGETS} EXPORT tollgateTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/tollgate DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS tollgate_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT tollgateTargets NAMESPACE tollgate::
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tollgate)
configure_package_config_file(cmake/tollgateConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/tollgateConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tollgate)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/tollgateConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/tollgateConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/tollgateConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tollgate)
