# `cmake --install`: the runtime as libepjit.so behind the imported target
# epjit::runtime, its headers, the compiler provider (when built), the tools,
# and epjitConfig.cmake for find_package(epjit). The wheel (scikit-build)
# installs only the Python package (python/CMakeLists.txt).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The static runtime whole, as a shared library. Only epjit's own symbols are
# exported (the version script), so the header-only spdlog, fmt and JSON
# inside it never clash with a consumer's copies.
# TargetInfo's objects come in as sources: its archive is already on the
# runtime's link line without the whole-archive feature.
add_library(epjit_runtime_shared SHARED $<TARGET_OBJECTS:epjit_targets>)
target_link_libraries(epjit_runtime_shared
  PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,epjit_runtime>" Threads::Threads ${CMAKE_DL_LIBS})
target_link_options(epjit_runtime_shared PRIVATE
  "-Wl,--version-script=${PROJECT_SOURCE_DIR}/cmake/libepjit.map" -Wl,--no-undefined)
set_target_properties(epjit_runtime_shared PROPERTIES
  OUTPUT_NAME epjit EXPORT_NAME runtime
  VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}
  LINK_DEPENDS ${PROJECT_SOURCE_DIR}/cmake/libepjit.map)
target_include_directories(epjit_runtime_shared INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(epjit_runtime_shared INTERFACE cxx_std_20)

install(TARGETS epjit_runtime_shared EXPORT epjitTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT development)
foreach(root runtime/include numerics/include targets/include)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${root}/epjit DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
          COMPONENT development FILES_MATCHING PATTERN "*.h")
endforeach()

# The tools find the provider in ../lib beside them, and libepjit.so beside itself.
install(TARGETS epjit-bench epjit-cache epjit-info epjit-warm RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        COMPONENT development)
if(EPJIT_HAVE_COMPILER)
  # The provider is self-contained; epjit-compile needs libMLIR.so where it was at build time.
  set_target_properties(epjit-compile PROPERTIES INSTALL_RPATH_USE_LINK_PATH TRUE)
  install(TARGETS epjit_kernel_source LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT development)
  install(TARGETS epjit-compile RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT development)
endif()

set(EPJIT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/epjit)
install(EXPORT epjitTargets NAMESPACE epjit:: DESTINATION ${EPJIT_CMAKE_DIR} COMPONENT development)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/epjitConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/epjitConfig.cmake INSTALL_DESTINATION ${EPJIT_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/epjitConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/epjitConfig.cmake ${PROJECT_BINARY_DIR}/epjitConfigVersion.cmake
        DESTINATION ${EPJIT_CMAKE_DIR} COMPONENT development)
