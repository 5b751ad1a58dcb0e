# EPJIT_VERSION_STRING and EPJIT_GIT_REVISION, and a generated header with both.
# The revision is read at build time (a custom target), so it stays current
# without reconfiguring.
set(EPJIT_VERSION_STRING ${PROJECT_VERSION})
set(EPJIT_VERSION_HEADER ${PROJECT_BINARY_DIR}/generated/epjit/build_info.h)
add_custom_target(epjit_build_info
  COMMAND ${CMAKE_COMMAND}
          -DSOURCE_DIR=${PROJECT_SOURCE_DIR}
          -DOUTPUT=${EPJIT_VERSION_HEADER}
          -DVERSION=${EPJIT_VERSION_STRING}
          -DREVISION=${EPJIT_REVISION}
          -P ${PROJECT_SOURCE_DIR}/cmake/WriteBuildInfo.cmake
  BYPRODUCTS ${EPJIT_VERSION_HEADER}
  COMMENT "epjit build info"
  VERBATIM)
