# epjit_embed(TARGET OUTPUT ROOTS PATTERNS [STRIP_EXTENSION]): a custom target
# that regenerates OUTPUT (see EmbedFiles.cmake) whenever an embedded file changes.
function(epjit_embed target output)
  cmake_parse_arguments(ARG "STRIP_EXTENSION" "" "ROOTS;PATTERNS" ${ARGN})
  set(dependencies)
  foreach(root ${ARG_ROOTS})
    foreach(pattern ${ARG_PATTERNS})
      file(GLOB_RECURSE matched CONFIGURE_DEPENDS ${root}/${pattern})
      list(APPEND dependencies ${matched})
    endforeach()
  endforeach()
  string(REPLACE ";" "|" roots "${ARG_ROOTS}")
  string(REPLACE ";" "|" patterns "${ARG_PATTERNS}")
  set(strip OFF)
  if(ARG_STRIP_EXTENSION)
    set(strip ON)
  endif()
  add_custom_command(
    OUTPUT ${output}
    COMMAND ${CMAKE_COMMAND} -DROOTS=${roots} -DPATTERNS=${patterns} -DSTRIP_EXTENSION=${strip}
            -DOUTPUT=${output} -P ${PROJECT_SOURCE_DIR}/cmake/EmbedFiles.cmake
    DEPENDS ${dependencies} ${PROJECT_SOURCE_DIR}/cmake/EmbedFiles.cmake
    COMMENT "embedding ${target}"
    VERBATIM)
  add_custom_target(${target} DEPENDS ${output})
endfunction()
