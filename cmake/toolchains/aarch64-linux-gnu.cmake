# Linux ARM64 (AArch64) with Debian's cross compiler (apt: g++-aarch64-linux-gnu).
# Dependencies for the target: `bash scripts/cross-deps.sh aarch64-linux-gnu`.
# The tests run under user-mode QEMU (apt: qemu-user); `-cpu max` exposes
# every ARMv8/v9 extension QEMU emulates (dotprod, i8mm, ...) so the fastest
# kernel variants run; KILN_CPU and QEMU_CPU can narrow that.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(KILN_CROSS_TRIPLE aarch64-linux-gnu)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
if(NOT DEFINED CMAKE_CROSSCOMPILING_EMULATOR)
  set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -cpu max -L /usr/aarch64-linux-gnu)
endif()
include("${CMAKE_CURRENT_LIST_DIR}/kiln-cross-common.cmake")
