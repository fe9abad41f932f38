# Installing gmopt as a library: headers under include/gmopt/ (the same
# "ir/IR.h" include lines as in the source tree), the static libraries, the
# tools, a CMake package (find_package(gmopt) -> gmopt::ir, gmopt::passes,
# gmopt::backend, gmopt::compiler, gmopt::runtime, gmopt::driver, ...) and a pkg-config file, gmopt.pc.
# tests/consumer/ builds a program against the installed package.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(GMOPT_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/gmopt)
set(GMOPT_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/gmopt)

# Each library as gmopt::<name>, in the build tree (ALIAS) as in the
# installed package (EXPORT_NAME). gmopt_llvm and gmopt_warnings are
# exported because the static libraries' link interfaces name them;
# gmopt::warnings reaches consumers as $<LINK_ONLY:...>, so its -Werror
# does not.
set(GMOPT_EXPORTED_LIBRARIES
  gmopt_llvm:llvm gmopt_warnings:warnings gmopt_gm_proto:gm_proto
  gmopt_ir:ir gmopt_passes:passes gmopt_backend:backend
  gmopt_backend_cpu:backend_cpu gmopt_backend_cuda:backend_cuda
  gmopt_compiler:compiler gmopt_runtime:runtime gmopt_driver:driver)
set(GMOPT_EXPORTED_TARGETS "")
foreach(entry ${GMOPT_EXPORTED_LIBRARIES})
  string(REPLACE ":" ";" pair ${entry})
  list(GET pair 0 target)
  list(GET pair 1 exportName)
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${exportName})
  add_library(gmopt::${exportName} ALIAS ${target})
  list(APPEND GMOPT_EXPORTED_TARGETS ${target})
endforeach()
install(TARGETS ${GMOPT_EXPORTED_TARGETS} EXPORT gmoptTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  # The source tree is the include root in the build (include_directories
  # in the top-level CMakeLists.txt); include/gmopt is it once installed.
  INCLUDES DESTINATION ${GMOPT_INSTALL_INCLUDEDIR}
  # The generated header of the .gm container's schema (ir/gm.pb.h).
  PUBLIC_HEADER DESTINATION ${GMOPT_INSTALL_INCLUDEDIR}/ir)
install(TARGETS gmopt-opt gmopt-compile gmopt-run
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The installed tools keep the paths of the shared libraries they link
# (libcudart outside the loader's default path).
set_target_properties(gmopt-opt gmopt-compile gmopt-run PROPERTIES
  INSTALL_RPATH_USE_LINK_PATH ON)

foreach(dir ir passes backend tools/compiler tools/runtime tools/driver)
  get_filename_component(parent ${GMOPT_INSTALL_INCLUDEDIR}/${dir} DIRECTORY)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir} DESTINATION ${parent}
    FILES_MATCHING PATTERN "*.h" PATTERN "*.def"
    PATTERN "testing" EXCLUDE)
endforeach()

install(EXPORT gmoptTargets NAMESPACE gmopt:: DESTINATION ${GMOPT_INSTALL_CMAKEDIR})
configure_package_config_file(
  ${CMAKE_CURRENT_LIST_DIR}/gmoptConfig.cmake.in
  ${CMAKE_BINARY_DIR}/gmoptConfig.cmake
  INSTALL_DESTINATION ${GMOPT_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/gmoptConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/gmoptConfig.cmake
              ${CMAKE_BINARY_DIR}/gmoptConfigVersion.cmake
  DESTINATION ${GMOPT_INSTALL_CMAKEDIR})

# --- pkg-config ------------------------------------------------------------------
# Libs lists every library a static link needs, in link order: gmopt's own,
# then its dependencies' files as the CMake targets know them.
set(GMOPT_PC_LIBS "")
foreach(lib driver runtime compiler passes backend_cpu backend_cuda backend ir gm_proto)
  string(APPEND GMOPT_PC_LIBS " -lgmopt_${lib}")
endforeach()
# A dependency as a link flag: an imported library's file, a path, a flag
# or -lNAME.
function(gmopt_pc_link_item item out)
  if(TARGET ${item})
    get_target_property(type ${item} TYPE)
    if(type STREQUAL "INTERFACE_LIBRARY")
      set(${out} "" PARENT_SCOPE)
    else()
      set(${out} " $<TARGET_LINKER_FILE:${item}>" PARENT_SCOPE)
    endif()
  elseif(IS_ABSOLUTE "${item}" OR item MATCHES "^-")
    set(${out} " ${item}" PARENT_SCOPE)
  else()
    set(${out} " -l${item}" PARENT_SCOPE)
  endif()
endfunction()
set(GMOPT_PC_DEPS LLVMSupport onnx onnx_proto protobuf::libprotobuf openblas)
if(GMOPT_HAVE_CUDA)
  # backend/'s CUDA::cudart is visible in that directory only.
  find_package(CUDAToolkit REQUIRED)
  list(APPEND GMOPT_PC_DEPS CUDA::cudart)
endif()
if(GMOPT_HAVE_MPI)
  # backend/'s MPI::MPI_C is an interface target seen there only: its
  # library files.
  find_package(MPI COMPONENTS C REQUIRED)
  list(APPEND GMOPT_PC_DEPS ${MPI_C_LIBRARIES})
endif()
# LLVMSupport's own dependencies (zlib, zstd, LLVMDemangle, ...).
get_target_property(GMOPT_LLVM_SUPPORT_DEPS LLVMSupport INTERFACE_LINK_LIBRARIES)
list(APPEND GMOPT_PC_DEPS ${GMOPT_LLVM_SUPPORT_DEPS})
foreach(dep ${GMOPT_PC_DEPS})
  gmopt_pc_link_item(${dep} flag)
  string(APPEND GMOPT_PC_LIBS "${flag}")
endforeach()
string(APPEND GMOPT_PC_LIBS " -pthread")
set(GMOPT_PC_CFLAGS "")
foreach(dir ${LLVM_INCLUDE_DIRS})
  string(APPEND GMOPT_PC_CFLAGS " -isystem ${dir}")
endforeach()
set(GMOPT_ONNX_DEFS "$<REMOVE_DUPLICATES:$<TARGET_PROPERTY:onnx,INTERFACE_COMPILE_DEFINITIONS>>")
string(APPEND GMOPT_PC_CFLAGS " ${LLVM_DEFINITIONS}"
  "$<$<BOOL:${GMOPT_ONNX_DEFS}>: -D$<JOIN:${GMOPT_ONNX_DEFS}, -D>>")
# The prefix is known only at install time (cmake --install --prefix), so
# the file is made in two steps: the generator expressions at generate
# time, @GMOPT_PC_PREFIX@ while installing.
set(GMOPT_PC_PREFIX "@GMOPT_PC_PREFIX@")
configure_file(${CMAKE_CURRENT_LIST_DIR}/gmopt.pc.in
               ${CMAKE_BINARY_DIR}/gmopt.pc.genex @ONLY)
file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/gmopt.pc.in
     INPUT ${CMAKE_BINARY_DIR}/gmopt.pc.genex)
install(CODE "
  set(GMOPT_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  configure_file(\"${CMAKE_BINARY_DIR}/gmopt.pc.in\"
                 \"${CMAKE_BINARY_DIR}/gmopt.pc\" @ONLY)")
install(FILES ${CMAKE_BINARY_DIR}/gmopt.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
