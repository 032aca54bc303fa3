# troupe_readme_blocks(README OUT_DIR): the README's ```cpp blocks as C++ programs, one
# OUT_DIR/readme_example_<N>.cpp per block (N counts the blocks from 1, in order), for the outside
# project that builds them against an installed Troupe (tests/install/).
#
#   include(cmake/ReadmeBlocks.cmake)
#   troupe_readme_blocks(${PROJECT_SOURCE_DIR}/README.md ${CMAKE_CURRENT_BINARY_DIR})
#   foreach(n IN LISTS readme_blocks) ... readme_example_${n}.cpp ... endforeach()
#
# A block that defines main() is a whole program. Any other block is the body of main(): its
# #include lines go above it, everything else (using directives too) inside. Sets in the caller:
#   readme_blocks    every block's N
#   readme_runnable  the blocks that run as they are (fence ```cpp, not ```cpp compile-only)
#   readme_launch_<N>  for a compile-only block whose main() says how it runs,
#                      `int main() {  // troupe launch --nproc 2 -- ./program`: the launch
#                      options between "troupe launch" and "--" (`--nproc;2`)
# Editing the README re-runs CMake, which regenerates the files (touched only when they change).
function(troupe_readme_blocks readme out_dir)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${readme})
  file(READ ${readme} rest)
  # Strings only, never lists: C++ is full of semicolons and brackets.
  set(count 0)
  set(blocks "")
  set(runnable "")
  while(TRUE)
    string(FIND "${rest}" "\n```cpp" fence)
    if(fence EQUAL -1)
      break()
    endif()
    math(EXPR count "${count} + 1")
    math(EXPR fence "${fence} + 7")
    string(SUBSTRING "${rest}" ${fence} -1 rest)
    string(FIND "${rest}" "\n" line_end)
    string(SUBSTRING "${rest}" 0 ${line_end} info)
    math(EXPR line_end "${line_end} + 1")
    string(SUBSTRING "${rest}" ${line_end} -1 rest)
    string(FIND "${rest}" "```" block_end)
    string(SUBSTRING "${rest}" 0 ${block_end} code)
    string(SUBSTRING "${rest}" ${block_end} -1 rest)

    set(header "// Generated from README.md (C++ block ${count}) by cmake/ReadmeBlocks.cmake: edit the README.\n")
    if(code MATCHES "int main\\(")
      set(source "${header}${code}")
    else()
      string(REGEX MATCHALL "#include[^\n]*" includes "${code}")
      string(REPLACE ";" "\n" includes "${includes}")
      string(REGEX REPLACE "#include[^\n]*\n" "" body "${code}")
      set(source "${header}${includes}\n\nint main() {\n${body}}\n")
    endif()
    set(file ${out_dir}/readme_example_${count}.cpp)
    file(WRITE ${file}.new "${source}")
    configure_file(${file}.new ${file} COPYONLY)

    list(APPEND blocks ${count})
    if(NOT info MATCHES "compile-only")
      list(APPEND runnable ${count})
    endif()
    set(launch "")
    if(code MATCHES "int main\\(\\) {  // troupe launch ([^\n]*) -- \\./program")
      string(REPLACE " " ";" launch "${CMAKE_MATCH_1}")
    endif()
    set(readme_launch_${count} "${launch}" PARENT_SCOPE)
  endwhile()
  if(count EQUAL 0)
    message(FATAL_ERROR "troupe_readme_blocks: no ```cpp block in ${readme}")
  endif()
  set(readme_blocks "${blocks}" PARENT_SCOPE)
  set(readme_runnable "${runnable}" PARENT_SCOPE)
endfunction()
