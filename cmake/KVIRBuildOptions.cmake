# Build options applied after MLIR has been found.

# Link every MLIR user against libMLIR.so: small binaries, sub-second links, and a
# single copy of MLIR's global registries (Debian's ExecutionEngine links it anyway).
set(MLIR_LINK_MLIR_DYLIB ON)

# add_mlir_tool leaves tools out of `all` unless this is set: kv-opt must be
# built by a plain `cmake --build`.
set(LLVM_BUILD_TOOLS ON)

find_program(KVIR_CCACHE ccache)
if(KVIR_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_C_COMPILER_LAUNCHER "${KVIR_CCACHE}")
  set(CMAKE_CXX_COMPILER_LAUNCHER "${KVIR_CCACHE}")
endif()

if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  find_program(KVIR_LLD NAMES ld.lld ld.lld-22 HINTS /usr/lib/llvm-22/bin)
  if(KVIR_LLD)
    add_link_options(-fuse-ld=lld)
  endif()
endif()

# Assertions: on in Debug builds (and on request), so that a missing registration or a
# broken invariant is a message, not a silent miscompile.
if(CMAKE_BUILD_TYPE STREQUAL "Debug")
  set(KVIR_ENABLE_ASSERTIONS_DEFAULT ON)
else()
  set(KVIR_ENABLE_ASSERTIONS_DEFAULT OFF)
endif()
option(KVIR_ENABLE_ASSERTIONS "Enable assertions in KVIR's own code"
       ${KVIR_ENABLE_ASSERTIONS_DEFAULT})
if(KVIR_ENABLE_ASSERTIONS)
  add_compile_options(-UNDEBUG)
endif()

# Sanitizers for KVIR's own code (docs/testing.md): e.g.
#   cmake -G Ninja -S . -B build-asan -DKVIR_SANITIZE=address,undefined
# Debian's libMLIR.so is not instrumented: LLVM's allocators poison memory in
# instrumented headers that libMLIR then writes, so ASan runs with
# allow_user_poisoning=0 (the defaults below are compiled into every
# executable). The shared sanitizer runtime lets our shared libraries (the C
# API, the plugin, the CUDA runtime) link with -z defs; executables find it
# through their RPATH.
set(KVIR_SANITIZE "" CACHE STRING
    "Sanitizers for KVIR's code, e.g. address,undefined (or thread)")
if(KVIR_SANITIZE)
  add_compile_options(-fsanitize=${KVIR_SANITIZE} -fno-omit-frame-pointer
                      -fno-sanitize-recover=all)
  if(KVIR_SANITIZE MATCHES "undefined")
    # libMLIR has no RTTI: its classes have no typeinfo to check against.
    # Calls through function pointers into JIT-compiled or dlopen'ed code
    # (program entries, the generated forward) find no type signature in
    # front of the callee: -fsanitize=function would read before it.
    add_compile_options(-fno-sanitize=vptr,function)
  endif()
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-runtime-dir
                  OUTPUT_VARIABLE KVIR_SANITIZER_RUNTIME_DIR
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  add_link_options(-fsanitize=${KVIR_SANITIZE} -shared-libsan
                   -Wl,-rpath,${KVIR_SANITIZER_RUNTIME_DIR})
endif()

# libFuzzer targets (test/fuzz, docs/testing.md): clang's coverage
# instrumentation on all of KVIR's code, and the fuzzers linked with
# -fsanitize=fuzzer. Combine with KVIR_SANITIZE=address,undefined. Without
# it the same targets build as plain programs that replay their corpora.
option(KVIR_BUILD_FUZZERS "Build test/fuzz's targets as libFuzzer fuzzers" OFF)
if(KVIR_BUILD_FUZZERS)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "KVIR_BUILD_FUZZERS needs clang (-fsanitize=fuzzer)")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()

# Gives every executable target defined so far (in this directory and those
# below) the sanitizer runtime's default options, which must be defined in
# the executable itself: called once, at the end of the top-level list.
function(kvir_add_sanitizer_defaults dir)
  if(NOT KVIR_SANITIZE)
    return()
  endif()
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target ${targets})
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "EXECUTABLE")
      target_sources(${target} PRIVATE
                     ${PROJECT_SOURCE_DIR}/cmake/SanitizerDefaults.cpp)
    endif()
  endforeach()
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(subdir ${subdirs})
    kvir_add_sanitizer_defaults(${subdir})
  endforeach()
endfunction()

set(CMAKE_CXX_STANDARD 17)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_EXPORT_COMPILE_COMMANDS ON)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)

# The stories260K checkpoint used by numerical tests. Tests that need it are reported
# as skipped, with the reason, where it is absent.
set(KVIR_TEST_MODEL "${PROJECT_SOURCE_DIR}/../shared/models/stories260K.bin"
    CACHE FILEPATH "llama2.c checkpoint used by the numerical tests")
get_filename_component(KVIR_TEST_MODEL_DIR "${KVIR_TEST_MODEL}" DIRECTORY)

# The CUDA toolkit (ptxas, libdevice) the GPU path compiles with. Found at
# configure time and passed explicitly to gpu-module-to-binary; optional:
# without it the GPU tests that need it are reported as unsupported.
find_program(KVIR_PTXAS ptxas HINTS /usr/local/cuda/bin ENV CUDA_HOME PATH_SUFFIXES bin)
if(KVIR_PTXAS)
  get_filename_component(KVIR_CUDA_TOOLKIT_DEFAULT "${KVIR_PTXAS}" DIRECTORY)
  get_filename_component(KVIR_CUDA_TOOLKIT_DEFAULT "${KVIR_CUDA_TOOLKIT_DEFAULT}" DIRECTORY)
else()
  set(KVIR_CUDA_TOOLKIT_DEFAULT "")
endif()
set(KVIR_CUDA_TOOLKIT "${KVIR_CUDA_TOOLKIT_DEFAULT}" CACHE PATH
    "CUDA toolkit root (ptxas, libdevice) for the GPU path")
