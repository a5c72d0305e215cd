# FindOpenBLAS: the CPU GEMM (Debian's libopenblas-dev). Defines OpenBLAS::OpenBLAS with cblas.h.
find_path(OpenBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas x86_64-linux-gnu x86_64-linux-gnu/openblas-pthread)
find_library(OpenBLAS_LIBRARY NAMES openblas PATH_SUFFIXES openblas-pthread x86_64-linux-gnu/openblas-pthread)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(OpenBLAS REQUIRED_VARS OpenBLAS_LIBRARY OpenBLAS_INCLUDE_DIR)
if(OpenBLAS_FOUND AND NOT TARGET OpenBLAS::OpenBLAS)
  add_library(OpenBLAS::OpenBLAS UNKNOWN IMPORTED GLOBAL)
  set_target_properties(OpenBLAS::OpenBLAS PROPERTIES IMPORTED_LOCATION "${OpenBLAS_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${OpenBLAS_INCLUDE_DIR}")
endif()
mark_as_advanced(OpenBLAS_INCLUDE_DIR OpenBLAS_LIBRARY)
