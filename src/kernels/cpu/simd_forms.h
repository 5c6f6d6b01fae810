// Kernels written twice: as plain loops the compiler vectorises (the portable form: any x86-64, the
// AVX-512 and AVX2 clones of cpu_rows.h's MIXTRAIN_SIMD_CLONES) and with AVX-512 intrinsics where
// GCC does not find the fast code itself (fp8_avx512.cpp, quantize_avx512.cpp). A CPU with AVX-512
// runs the intrinsics; the tests run both forms there, through this switch, and hold each to the
// scalar reference.
#pragma once

namespace mixtrain::cpu {

bool portable_forms_only();
void set_portable_forms_only(bool on);  // process-wide; tests only
// Whether the AVX-512 intrinsics forms run: the CPU has AVX-512 F, BW and VL (what they are
// compiled for, avx512_lanes.h) and the portable forms are not forced.
bool avx512_forms_run();

}  // namespace mixtrain::cpu
