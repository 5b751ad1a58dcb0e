# write_if_changed(PATH CONTENT): writes PATH only when its content differs,
# so generated files do not trigger needless rebuilds. For cmake -P scripts.
function(write_if_changed path content)
  if(EXISTS ${path})
    file(READ ${path} previous)
  endif()
  if(NOT previous STREQUAL content)
    file(WRITE ${path} "${content}")
  endif()
endfunction()
