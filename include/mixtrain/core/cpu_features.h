// What this CPU (and OS) can run, detected once, plus the process-wide switch that forces the
// scalar reference paths (STYLE lesson 1). Fast paths dispatch on these flags at run time: the
// library itself is compiled for baseline x86-64.
#pragma once

namespace mixtrain {

// true = the instructions exist AND the OS saves their register state (XCR0), i.e. usable.
struct CpuFeatures {
  bool intel;  // vendor GenuineIntel (kernel routes measured per vendor, e.g. the bf16 GEMM's)
  bool avx2, fma, f16c;
  bool avx512f, avx512bw, avx512vl, avx512_bf16, avx512_fp16;
  bool amx_bf16, amx_tile;  // Linux additionally needs arch_prctl(ARCH_REQ_XCOMP_PERM) to use AMX
  // Integer dot products into int32 lanes (the int8 GEMM is exact on them: kernels/quantize.h).
  bool avx512_vnni, avx_vnni, amx_int8;
};

// Detected on first call; later calls return the same object.
const CpuFeatures& cpu_features();

// True when every dispatched fast path must use its scalar reference instead. Starts from the
// environment (MIXTRAIN_FORCE_REFERENCE set to anything but "" or "0", read once) and can be
// changed at any time with set_force_reference; dispatchers read it on every call.
bool force_reference();
void set_force_reference(bool on);

}  // namespace mixtrain
