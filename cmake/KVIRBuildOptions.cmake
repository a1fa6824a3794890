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
