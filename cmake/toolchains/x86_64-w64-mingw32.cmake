# Windows x86-64 with MinGW-w64 GCC, POSIX thread model (apt:
# g++-mingw-w64-x86-64-posix; the win32 thread model lacks std::thread in
# GCC 12). Dependencies for the target: `bash scripts/cross-deps.sh x86_64-w64-mingw32`.
# Executables are linked statically (libstdc++, libgcc, winpthread) so they
# run under wine, or when copied to Windows, without MinGW's DLLs.
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR AMD64)
set(KILN_CROSS_TRIPLE x86_64-w64-mingw32)
set(CMAKE_C_COMPILER x86_64-w64-mingw32-gcc-posix)
set(CMAKE_CXX_COMPILER x86_64-w64-mingw32-g++-posix)
set(CMAKE_RC_COMPILER x86_64-w64-mingw32-windres)
if(NOT DEFINED CMAKE_CROSSCOMPILING_EMULATOR)
  set(CMAKE_CROSSCOMPILING_EMULATOR env WINEDEBUG=-all wine)
endif()
include("${CMAKE_CURRENT_LIST_DIR}/kiln-cross-common.cmake")
