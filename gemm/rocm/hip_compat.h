// The one place where the kernel source meets its compiler.
// - gfx942 builds (Debian clang-19 + HIP 5.2 headers here, full ROCm in rocm/pytorch images):
//   <hip/hip_runtime.h>. Nothing newer than HIP 5.2 is used: no hip_fp8.h, no bf16 header, no
//   rocWMMA; fp8 is raw bytes fed to the MFMA builtins, bf16 is rounded by hand.
// - CPU emulation (GEMM_HIP_EMULATOR): the emulator's header provides the same names on the host.
#pragma once

#ifdef GEMM_HIP_EMULATOR
#include "emu/hip_emu.h"
#else
#include <hip/hip_runtime.h>
#endif

#include <stddef.h>
#include <stdint.h>
