# Shared by the cross toolchain files (included after they name the compilers
# and KILN_CROSS_TRIPLE). Libraries are looked up only for the target: in the
# compiler's own sysroot (/usr/<triple>, Debian's layout) and in the cross
# dependency prefix that scripts/cross-deps.sh fills (PCRE2 and GoogleTest
# built for the target, plus copies of the header-only nlohmann/json and
# CLI11), so that no x86-64 library or host glibc header can leak in.

# Where scripts/cross-deps.sh installs the target's dependencies. The
# environment variable wins so that one prefix can serve several checkouts.
if(DEFINED ENV{KILN_CROSS_DEPS_DIR})
  set(KILN_CROSS_DEPS_DIR "$ENV{KILN_CROSS_DEPS_DIR}")
else()
  get_filename_component(KILN_CROSS_DEPS_DIR "${CMAKE_CURRENT_LIST_DIR}/../../build/cross-deps/${KILN_CROSS_TRIPLE}" ABSOLUTE)
endif()

set(CMAKE_FIND_ROOT_PATH "/usr/${KILN_CROSS_TRIPLE}" "${KILN_CROSS_DEPS_DIR}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)   # build tools (python3, pkg-config) run on the host
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# CLI11 is included by path only (no find_package), so the prefix's include
# folder is on every compile line, after the compiler's own folders.
set(CMAKE_C_STANDARD_INCLUDE_DIRECTORIES "${KILN_CROSS_DEPS_DIR}/include")
set(CMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES "${KILN_CROSS_DEPS_DIR}/include")
# pkg-config (PCRE2) sees the target's .pc files only.
set(ENV{PKG_CONFIG_LIBDIR} "${KILN_CROSS_DEPS_DIR}/lib/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
set(ENV{PKG_CONFIG_SYSROOT_DIR} "")
