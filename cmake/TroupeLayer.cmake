# troupe_layer(NAME <layer> SOURCES ... PUBLIC_HEADERS ... [DEPS ...] [PRIVATE_DEPS ...]): one
# shared library per layer, built from the layer's *.cpp (and *.cu when CUDA is on), exported as
# troupe::<layer>. Shared, so each op file's static registrar runs.
#
# PUBLIC_HEADERS (paths or globs relative to the layer's folder) are installed under
# include/troupe/<layer>/; every other header is internal and stays in the source tree. After the
# layers are added, troupe_check_installed_headers() fails the configure step when an installed
# header includes one that is not installed, so the installed tree always compiles on its own.
function(troupe_layer layer)
  cmake_parse_arguments(ARG "" "" "DEPS;PRIVATE_DEPS;SOURCES;PUBLIC_HEADERS" ${ARGN})
  set(target troupe_${layer})
  add_library(${target} SHARED ${ARG_SOURCES})
  add_library(troupe::${layer} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${layer} OUTPUT_NAME troupe_${layer})
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/troupe>)
  target_link_libraries(${target} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS} $<BUILD_INTERFACE:troupe_warnings>)
  # The headers are C++20: a project that links troupe::<layer> compiles as C++20 at least.
  target_compile_features(${target} PUBLIC cxx_std_20)
  install(TARGETS ${target} EXPORT troupeTargets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})

  foreach(pattern IN LISTS ARG_PUBLIC_HEADERS)
    file(GLOB headers RELATIVE ${CMAKE_CURRENT_SOURCE_DIR} CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${pattern})
    if(NOT headers)
      message(FATAL_ERROR "${layer}: PUBLIC_HEADERS names '${pattern}', but no such header exists")
    endif()
    foreach(header IN LISTS headers)
      get_filename_component(subdir ${header} DIRECTORY)
      install(FILES ${header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/troupe/${layer}/${subdir})
      set_property(GLOBAL APPEND PROPERTY TROUPE_INSTALLED_HEADERS ${layer}/${header})
    endforeach()
  endforeach()
endfunction()

# Every installed header (and the extra files given, e.g. troupe.h) may include only installed
# headers of the project: a configure error names the culprit and the missing header otherwise.
function(troupe_check_installed_headers)
  get_property(installed GLOBAL PROPERTY TROUPE_INSTALLED_HEADERS)
  foreach(header IN LISTS installed ARGN)
    file(STRINGS ${PROJECT_SOURCE_DIR}/${header} includes REGEX "^#include \"")
    foreach(line IN LISTS includes)
      string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" included "${line}")
      if(EXISTS ${PROJECT_SOURCE_DIR}/${included} AND NOT included IN_LIST installed)
        message(FATAL_ERROR "${header} is installed and includes ${included}, which is not: add it to its "
                            "layer's PUBLIC_HEADERS, or include it only from .cpp files")
      endif()
    endforeach()
  endforeach()
endfunction()
