# AssemblerStableExtension.cmake: build a torch extension against the Stable ABI, as abi3.
#
#   include(AssemblerStableExtension)   # with this directory on CMAKE_MODULE_PATH
#   assembler_stable_extension(_vecadd_C
#     SOURCES csrc/vecadd.cu csrc/bindings.cpp
#     LANGUAGE CUDA                      # CXX (default) or CUDA: adds USE_CUDA
#     INCLUDE_DIRS csrc/include
#     DEFINES MY_FLAG=1
#     LIBRARIES cuda                     # beyond libtorch_cpu (the C shim) and, for CUDA, libtorch_cuda
#     CXX_STD 20                         # -std of the C++ units (gnu++N; default CMAKE_CXX_STANDARD, else 17)
#     CUDA_STD 20                        # -std of the .cu units (c++N; default CXX_STD, else 17)
#     CXX_FLAGS -fopenmp                 # extra flags of the C++ units
#     CUDA_FLAGS --expt-relaxed-constexpr --use_fast_math   # extra flags of the .cu units
#     PTX                                # also ship PTX for arch-specific targets (90a, 100a)
#     DESTINATION vecadd)                # wheel directory of the module
#
# System include directories (what `assemble check` preprocesses with; assemble passes them
# from its compile model, builder/units.py): CXX_SYSTEM_INCLUDE_DIRS and CUDA_SYSTEM_INCLUDE_DIRS.
# By default both are torch's two include roots (include/, then the C++ API's
# include/torch/csrc/api/include, so an unmigrated #include <torch/python.h> fails on torch's
# TORCH_TARGET_VERSION guard, not on a missing file), and the C++ units of a CUDA extension
# also get the toolkit's include/ and include/cccl (cuda_fp16.h, cuda_runtime.h).
#
# A CUDA extension always links libtorch_cuda: the CUDA half of the C shim
# (aoti_torch_get_current_cuda_stream, the CUDA guards, torch_c10_cuda_check_msg) lives there,
# torch does not export it globally, and a module that needs it and lacks the DT_NEEDED entry
# fails to load ("undefined symbol"). Linking it whether or not the units call those shims
# costs one DT_NEEDED entry of a library every CUDA torch loads anyway; deciding from the
# objects would be a guess made after compiling, and a wrong guess is a wheel that cannot load.
# c10_cuda is not needed: no Stable-ABI symbol lives there.
#
# Arch-specific targets (90a, 100a, 100f) run only on their own GPU family, so their PTX can
# never be JIT-compiled anywhere else: they get SASS only (90a-real) unless PTX is given.
# Cache variables (assemble sets them; the defaults make the helper usable by hand):
#   ASSEMBLER_PYTHON_ABI    oldest CPython of the abi3 module            (3.9)
#   ASSEMBLER_TORCH_TARGET  oldest torch of the Stable ABI, MAJOR.MINOR  (2.10)
#   ASSEMBLER_TORCH_DIR     the torch package the headers come from      (found via Python)
#   ASSEMBLER_SOURCE_DIR    the dependency's checkout: objects named by their path in it (unset: CMake's names)
#
# Every extension gets Py_LIMITED_API (through USE_SABI), TORCH_TARGET_VERSION in torch's 64-bit
# form, which turns each header outside the Stable ABI into an #error, hidden visibility and a
# weak PyInit_<name> so the module imports even when its sources only register ops.

cmake_minimum_required(VERSION 3.26)  # Development.SABIModule and USE_SABI
include_guard(GLOBAL)

set(ASSEMBLER_PYTHON_ABI "3.9" CACHE STRING "Oldest CPython the abi3 modules load in")
set(ASSEMBLER_TORCH_TARGET "2.10" CACHE STRING "Oldest torch (MAJOR.MINOR) of the Stable ABI")
set(ASSEMBLER_TORCH_DIR "" CACHE PATH "Directory of the torch package the headers come from")
set(ASSEMBLER_CUDA_HOME "" CACHE PATH "The CUDA toolkit's root (default: from CMAKE_CUDA_COMPILER)")

find_package(Python ${ASSEMBLER_PYTHON_ABI} REQUIRED COMPONENTS Interpreter Development.SABIModule)

if(NOT ASSEMBLER_TORCH_DIR)
  # find_spec locates torch without importing it (an import takes seconds).
  execute_process(
    COMMAND "${Python_EXECUTABLE}" -c
            "import importlib.util as u; s = u.find_spec('torch'); print(s.submodule_search_locations[0] if s else '')"
    OUTPUT_VARIABLE _assembler_torch_dir OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
  if(NOT _assembler_torch_dir)
    message(FATAL_ERROR "torch is not installed for ${Python_EXECUTABLE}; set ASSEMBLER_TORCH_DIR")
  endif()
  set(ASSEMBLER_TORCH_DIR "${_assembler_torch_dir}" CACHE PATH "" FORCE)
endif()
if(NOT EXISTS "${ASSEMBLER_TORCH_DIR}/include/torch/csrc/stable/library.h")
  message(FATAL_ERROR "${ASSEMBLER_TORCH_DIR} holds no Stable ABI headers (torch/csrc/stable/library.h)")
endif()

if(NOT ASSEMBLER_TORCH_TARGET MATCHES "^([0-9]+)\\.([0-9]+)$")
  message(FATAL_ERROR "ASSEMBLER_TORCH_TARGET=${ASSEMBLER_TORCH_TARGET} is not MAJOR.MINOR")
endif()
# TORCH_TARGET_VERSION = major << 56 | minor << 48, written as torch documents it: 0x020A000000000000.
math(EXPR _assembler_target "(${CMAKE_MATCH_1} << 56) | (${CMAKE_MATCH_2} << 48)" OUTPUT_FORMAT HEXADECIMAL)
string(SUBSTRING "${_assembler_target}" 2 -1 _assembler_target)
string(TOUPPER "${_assembler_target}" _assembler_target)
string(LENGTH "${_assembler_target}" _assembler_len)
while(_assembler_len LESS 16)
  string(PREPEND _assembler_target "0")
  math(EXPR _assembler_len "${_assembler_len} + 1")
endwhile()
set(ASSEMBLER_TORCH_TARGET_VERSION "0x${_assembler_target}")

set(ASSEMBLER_TORCH_INCLUDE_DIRS "${ASSEMBLER_TORCH_DIR}/include" "${ASSEMBLER_TORCH_DIR}/include/torch/csrc/api/include")

# A library name resolves in torch's lib directory first (libtorch_cuda, libc10_cuda, ...),
# then as CMake normally would. A torch library this torch build lacks (libtorch_cuda in a CPU
# build) is linked through a stand-in that carries only its soname: the module records
# DT_NEEDED libtorch_cuda.so, exactly as against the real file, and the torch that loads the
# module provides it. The Stable ABI does not depend on the build's torch flavour.
function(_assembler_resolve_library out name)
  find_library(_lib_${name} NAMES ${name} PATHS "${ASSEMBLER_TORCH_DIR}/lib" NO_DEFAULT_PATH)
  if(_lib_${name})
    set(${out} "${_lib_${name}}" PARENT_SCOPE)
  elseif(name MATCHES "^(torch|c10)(_[a-z_]+)?$")
    if(NOT TARGET assembler_soname_${name})
      message(STATUS "assembler: ${ASSEMBLER_TORCH_DIR} has no lib${name}.so; linking its soname (torch provides it at run time)")
      set(_src "${CMAKE_CURRENT_BINARY_DIR}/assembler_soname_${name}.cpp")
      file(CONFIGURE OUTPUT "${_src}" CONTENT "// Link-time stand-in for lib${name}.so (soname only; never installed).\n")
      add_library(assembler_soname_${name} SHARED "${_src}")
      set_target_properties(assembler_soname_${name} PROPERTIES
        OUTPUT_NAME ${name} LIBRARY_OUTPUT_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}/assembler_soname")
    endif()
    set(${out} assembler_soname_${name} PARENT_SCOPE)
  else()
    set(${out} "${name}" PARENT_SCOPE)
  endif()
endfunction()

# Each source of the checkout (ASSEMBLER_SOURCE_DIR) outside this directory's source and build
# trees gets an object named by its path in the checkout (csrc/scale.cu -> csrc/scale.cu.o):
# CMake names such an object after the source's absolute path
# (CMakeFiles/x.dir/home/me/ws/forks/dep/csrc/scale.cu.o), which would put where the workspace
# lives into every -o and -MT, and into the depfile a compiler cache stores and hands another
# workspace. OBJECT_NAME is CMake 4.2's; an older CMake ignores it and keeps its own names.
function(_assembler_object_names target)
  if(NOT ASSEMBLER_SOURCE_DIR)
    return()
  endif()
  foreach(_source IN LISTS ARGN)
    cmake_path(ABSOLUTE_PATH _source BASE_DIRECTORY "${CMAKE_CURRENT_SOURCE_DIR}" NORMALIZE OUTPUT_VARIABLE _full)
    set(_named_by_cmake FALSE)
    foreach(_tree IN ITEMS "${CMAKE_CURRENT_SOURCE_DIR}" "${CMAKE_CURRENT_BINARY_DIR}")
      cmake_path(IS_PREFIX _tree "${_full}" NORMALIZE _inside)
      if(_inside)
        set(_named_by_cmake TRUE)  # already relative to the tree
      endif()
    endforeach()
    cmake_path(IS_PREFIX ASSEMBLER_SOURCE_DIR "${_full}" NORMALIZE _in_checkout)
    if(_in_checkout AND NOT _named_by_cmake)
      cmake_path(RELATIVE_PATH _full BASE_DIRECTORY "${ASSEMBLER_SOURCE_DIR}" OUTPUT_VARIABLE _relative)
      set_source_files_properties("${_full}" TARGET_DIRECTORY ${target} PROPERTIES OBJECT_NAME "${_relative}")
    endif()
  endforeach()
endfunction()

function(assembler_stable_extension name)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "PTX" "LANGUAGE;DESTINATION;CXX_STD;CUDA_STD"
    "SOURCES;INCLUDE_DIRS;DEFINES;LIBRARIES;CXX_FLAGS;CUDA_FLAGS;CXX_SYSTEM_INCLUDE_DIRS;CUDA_SYSTEM_INCLUDE_DIRS")
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "assembler_stable_extension(${name}): unknown arguments ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "assembler_stable_extension(${name}): no SOURCES")
  endif()
  if(NOT ARG_LANGUAGE)
    set(ARG_LANGUAGE CXX)
  endif()
  string(TOUPPER "${ARG_LANGUAGE}" ARG_LANGUAGE)
  if(NOT ARG_LANGUAGE MATCHES "^(CXX|CUDA)$")
    message(FATAL_ERROR "assembler_stable_extension(${name}): LANGUAGE must be CXX or CUDA, not ${ARG_LANGUAGE}")
  endif()
  if(ARG_LANGUAGE STREQUAL "CUDA" AND NOT CMAKE_CUDA_COMPILER_LOADED)
    message(FATAL_ERROR "assembler_stable_extension(${name}): enable CUDA first, e.g. project(... LANGUAGES CXX CUDA)")
  endif()
  if(NOT ARG_CXX_STD)
    if(CMAKE_CXX_STANDARD)
      set(ARG_CXX_STD "${CMAKE_CXX_STANDARD}")
    else()
      set(ARG_CXX_STD 17)
    endif()
  endif()
  if(NOT ARG_CUDA_STD)
    set(ARG_CUDA_STD "${ARG_CXX_STD}")
  endif()
  if(NOT DEFINED ARG_CXX_SYSTEM_INCLUDE_DIRS)
    set(ARG_CXX_SYSTEM_INCLUDE_DIRS ${ASSEMBLER_TORCH_INCLUDE_DIRS})
    if(ARG_LANGUAGE STREQUAL "CUDA")
      set(_cuda_home "${ASSEMBLER_CUDA_HOME}")
      if(NOT _cuda_home)  # the toolkit of the nvcc CMake enabled: <root>/bin/nvcc
        get_filename_component(_cuda_home "${CMAKE_CUDA_COMPILER}" DIRECTORY)
        get_filename_component(_cuda_home "${_cuda_home}" DIRECTORY)
      endif()
      list(APPEND ARG_CXX_SYSTEM_INCLUDE_DIRS "${_cuda_home}/include" "${_cuda_home}/include/cccl")
    endif()
  endif()
  if(NOT DEFINED ARG_CUDA_SYSTEM_INCLUDE_DIRS)
    set(ARG_CUDA_SYSTEM_INCLUDE_DIRS ${ASSEMBLER_TORCH_INCLUDE_DIRS})
  endif()

  # Weak, so a source that defines its own PyInit_<name> wins at link time.
  set(_stub "${CMAKE_CURRENT_BINARY_DIR}/assembler_pyinit_${name}.cpp")
  file(CONFIGURE OUTPUT "${_stub}" @ONLY CONTENT [=[
// Generated by AssemblerStableExtension.cmake: the module object for an extension whose
// sources only register torch ops. Limited API only (Py_LIMITED_API comes from USE_SABI).
#include <Python.h>

extern "C" __attribute__((weak, visibility("default"))) PyObject* PyInit_@name@(void) {
  static PyModuleDef module = {PyModuleDef_HEAD_INIT, "@name@", nullptr, -1, nullptr, nullptr, nullptr, nullptr, nullptr};
  return PyModule_Create(&module);
}
]=])

  Python_add_library(${name} MODULE USE_SABI ${ASSEMBLER_PYTHON_ABI} WITH_SOABI ${ARG_SOURCES} "${_stub}")
  _assembler_object_names(${name} ${ARG_SOURCES})
  target_include_directories(${name} PRIVATE ${ARG_INCLUDE_DIRS})
  foreach(_dir IN LISTS ARG_CXX_SYSTEM_INCLUDE_DIRS)
    target_include_directories(${name} SYSTEM PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:${_dir}>")
  endforeach()
  foreach(_dir IN LISTS ARG_CUDA_SYSTEM_INCLUDE_DIRS)
    target_include_directories(${name} SYSTEM PRIVATE "$<$<COMPILE_LANGUAGE:CUDA>:${_dir}>")
  endforeach()
  target_compile_definitions(${name} PRIVATE TORCH_TARGET_VERSION=${ASSEMBLER_TORCH_TARGET_VERSION} ${ARG_DEFINES})
  # The standard is always set explicitly (CMake omits -std when the compiler's default would
  # do, and then the compile commands would not say what `check` must preprocess with).
  set_target_properties(${name} PROPERTIES CXX_STANDARD ${ARG_CXX_STD} CXX_STANDARD_REQUIRED ON)
  foreach(_flag IN LISTS ARG_CXX_FLAGS)
    target_compile_options(${name} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:${_flag}>")
  endforeach()
  foreach(_flag IN LISTS ARG_CUDA_FLAGS)
    target_compile_options(${name} PRIVATE "$<$<COMPILE_LANGUAGE:CUDA>:${_flag}>")
  endforeach()
  # Reproducible bytes: paths of torch's headers (in __FILE__) and of the generated stub are
  # recorded relative to torch and the build tree, not to where they happen to live.
  foreach(_map "${ASSEMBLER_TORCH_DIR}=torch" "${CMAKE_BINARY_DIR}=build")
    target_compile_options(${name} PRIVATE
      "$<$<COMPILE_LANGUAGE:CXX>:-ffile-prefix-map=${_map}>"
      "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-ffile-prefix-map=${_map}>")
  endforeach()
  # No build-tree RPATH: it would name torch's location, change the build-id with it, and the
  # module only ever runs from the wheel (where torch is loaded first).
  set_target_properties(${name} PROPERTIES
    SKIP_BUILD_RPATH ON
    CXX_VISIBILITY_PRESET hidden
    CUDA_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  if(ARG_LANGUAGE STREQUAL "CUDA")
    target_compile_definitions(${name} PRIVATE USE_CUDA)
    set_target_properties(${name} PROPERTIES CUDA_STANDARD ${ARG_CUDA_STD} CUDA_STANDARD_REQUIRED ON CUDA_RUNTIME_LIBRARY Shared)
    set(_archs)
    foreach(_arch IN LISTS CMAKE_CUDA_ARCHITECTURES)
      string(REGEX REPLACE "-(real|virtual)$" "" _bare "${_arch}")
      if(_bare MATCHES "^[0-9]+[af]$" AND NOT ARG_PTX)
        list(APPEND _archs "${_bare}-real")  # SASS only: this PTX runs on no other GPU
      else()
        list(APPEND _archs "${_arch}")
      endif()
    endforeach()
    if(_archs)
      set_target_properties(${name} PROPERTIES CUDA_ARCHITECTURES "${_archs}")
    endif()
  endif()

  # The C shim (aoti_torch_*, torch_*) lives in libtorch_cpu, its CUDA half in libtorch_cuda
  # (see the top of this file); nothing else of libtorch is needed.
  set(_wanted torch_cpu)
  if(ARG_LANGUAGE STREQUAL "CUDA")
    list(APPEND _wanted torch_cuda)
  endif()
  list(APPEND _wanted ${ARG_LIBRARIES})
  list(REMOVE_DUPLICATES _wanted)
  set(_libs)
  foreach(_lib IN LISTS _wanted)
    _assembler_resolve_library(_resolved ${_lib})
    list(APPEND _libs "${_resolved}")
  endforeach()
  # --no-as-needed: keep every listed library even where a linker defaults to --as-needed (a
  # soname stand-in satisfies no symbol at link time).
  target_link_options(${name} PRIVATE "LINKER:--no-as-needed")
  target_link_libraries(${name} PRIVATE ${_libs})

  if(ARG_DESTINATION)
    install(TARGETS ${name} LIBRARY DESTINATION "${ARG_DESTINATION}")
  else()
    install(TARGETS ${name} LIBRARY DESTINATION .)
  endif()
endfunction()
