# troupe_layer(NAME <layer> [DEPS ...]): one shared library per layer, built from the
# layer's *.cpp (and *.cu when CUDA is on), exported as troupe::<layer>, its headers
# installed under include/troupe/<layer>/. Shared, so each op file's static registrar runs.
function(troupe_layer layer)
  cmake_parse_arguments(ARG "" "" "DEPS;PRIVATE_DEPS;SOURCES" ${ARGN})
  set(target troupe_${layer})
  add_library(${target} SHARED ${ARG_SOURCES})
  add_library(troupe::${layer} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${layer} OUTPUT_NAME troupe_${layer})
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/troupe>)
  target_link_libraries(${target} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS} $<BUILD_INTERFACE:troupe_warnings>)
  install(TARGETS ${target} EXPORT troupeTargets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/troupe/${layer}
    FILES_MATCHING PATTERN "*.h")
endfunction()
