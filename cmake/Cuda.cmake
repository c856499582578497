# CUDA detection. SYNCLINE_CUDA=AUTO builds CUDA code when nvcc is found, ON requires it,
# OFF never looks. The result is SYNCLINE_HAVE_CUDA (and SYNCLINE_HAVE_NCCL), which later
# layers use to add their *.cu kernels; nothing in the CPU build depends on it.
set(SYNCLINE_HAVE_CUDA OFF)
set(SYNCLINE_HAVE_NCCL OFF)
if(NOT SYNCLINE_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # CMake 3.25 does not know nvcc's C++20 flag.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    if(NOT CMAKE_CUDA_ARCHITECTURES)
      # "native" fails on machines without a GPU: name Hopper and a PTX fallback.
      set(CMAKE_CUDA_ARCHITECTURES "90;80-virtual")
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(SYNCLINE_HAVE_CUDA ON)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${CUDAToolkit_LIBRARY_DIR})
    if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      set(SYNCLINE_HAVE_NCCL ON)
    endif()
  elseif(SYNCLINE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "SYNCLINE_CUDA=ON but no CUDA compiler (nvcc) was found")
  endif()
endif()
message(STATUS "Syncline: CUDA ${SYNCLINE_HAVE_CUDA}, NCCL ${SYNCLINE_HAVE_NCCL}")

# The directory's warning flags are g++'s, which nvcc refuses: keep them for a target's C++
# sources and hand nvcc's host compiler its own through -Xcompiler (less the warning on
# designated initializers, which nvcc's front end rewrites as positional ones). Warnings are
# errors for CUDA sources too with SYNCLINE_WERROR.
function(syncline_cuda_warnings target)
  get_target_property(_options ${target} COMPILE_OPTIONS)
  if(_options)
    list(TRANSFORM _options REPLACE "^(.+)$" "$<$<COMPILE_LANGUAGE:CXX>:\\1>")
    set_target_properties(${target} PROPERTIES COMPILE_OPTIONS "${_options}")
  endif()
  target_compile_options(${target} PRIVATE
    "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter,-Wno-missing-field-initializers>")
  if(SYNCLINE_WERROR)
    target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CUDA>:--Werror=all-warnings>")
  endif()
endfunction()
