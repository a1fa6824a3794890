# Defaults that let a plain `cmake -S . -B build` work on Debian 12 with LLVM 22:
# clang-22 as the compiler (faster and leaner than g++ on MLIR code) when nothing
# else was asked for. Included before project(), so it can only set variables.
if(NOT DEFINED CMAKE_CXX_COMPILER AND NOT DEFINED ENV{CXX})
  find_program(KVIR_CLANGXX NAMES clang++-22 HINTS /usr/lib/llvm-22/bin)
  find_program(KVIR_CLANG NAMES clang-22 HINTS /usr/lib/llvm-22/bin)
  if(KVIR_CLANGXX AND KVIR_CLANG)
    set(CMAKE_CXX_COMPILER "${KVIR_CLANGXX}")
    set(CMAKE_C_COMPILER "${KVIR_CLANG}")
  endif()
endif()
if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  set(CMAKE_BUILD_TYPE Release CACHE STRING "Build type (Release, Debug, RelWithDebInfo)" FORCE)
endif()
