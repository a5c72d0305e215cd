# FindNCCL: NCCL 2 from the CUDA toolkit (/usr/local/cuda), the system, or a Python `nvidia/nccl`
# wheel. NCCL_ROOT (CMake variable or environment) is searched first and alone, so that a wheel wins
# over a toolkit copy; wheels ship only libnccl.so.2, so that name is searched too. Defines NCCL::nccl.
set(_nccl_roots ${NCCL_ROOT} $ENV{NCCL_ROOT})
if(_nccl_roots)
  find_path(NCCL_INCLUDE_DIR nccl.h PATHS ${_nccl_roots} PATH_SUFFIXES include NO_DEFAULT_PATH)
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR PATHS ${_nccl_roots}
               PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
endif()
set(_nccl_hints ${CUDAToolkit_LIBRARY_ROOT} /usr/local/cuda)
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${_nccl_hints} PATH_SUFFIXES lib lib64)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
  REASON_FAILURE_MESSAGE "set NCCL_ROOT to the NCCL 2 folder (with include/ and lib/), e.g. site-packages/nvidia/nccl, or configure with -DTANDEM_CUDA=OFF")
if(NCCL_FOUND AND NOT TARGET NCCL::nccl)
  add_library(NCCL::nccl UNKNOWN IMPORTED GLOBAL)
  set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)
