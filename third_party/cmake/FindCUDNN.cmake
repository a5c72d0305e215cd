# FindCUDNN: cuDNN 9 from the CUDA toolkit (/usr/local/cuda) or from a Python `nvidia/cudnn` wheel.
# CUDNN_ROOT (CMake variable or environment) is searched first and alone, so that a wheel wins over
# a toolkit copy; wheels ship only versioned sonames (libcudnn.so.9), so that name is searched too.
# Defines CUDNN::cudnn.
set(_cudnn_roots ${CUDNN_ROOT} $ENV{CUDNN_ROOT})
if(_cudnn_roots)
  find_path(CUDNN_INCLUDE_DIR cudnn.h PATHS ${_cudnn_roots} PATH_SUFFIXES include NO_DEFAULT_PATH)
  find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 NAMES_PER_DIR PATHS ${_cudnn_roots}
               PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
endif()
set(_cudnn_hints ${CUDAToolkit_LIBRARY_ROOT} /usr/local/cuda)
find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${_cudnn_hints} PATH_SUFFIXES include)
find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 NAMES_PER_DIR HINTS ${_cudnn_hints} PATH_SUFFIXES lib lib64 lib/x64)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN REQUIRED_VARS CUDNN_LIBRARY CUDNN_INCLUDE_DIR
  REASON_FAILURE_MESSAGE "set CUDNN_ROOT to the cuDNN 9 folder (with include/ and lib/), e.g. site-packages/nvidia/cudnn, or configure with -DTANDEM_CUDA=OFF")
if(CUDNN_FOUND AND NOT TARGET CUDNN::cudnn)
  add_library(CUDNN::cudnn UNKNOWN IMPORTED GLOBAL)
  set_target_properties(CUDNN::cudnn PROPERTIES IMPORTED_LOCATION "${CUDNN_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}")
endif()
mark_as_advanced(CUDNN_INCLUDE_DIR CUDNN_LIBRARY)
