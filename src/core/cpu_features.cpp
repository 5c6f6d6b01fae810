// CPU feature detection (GCC's __builtin_cpu_supports plus an explicit XCR0 check that the OS
// saves the wider register state) and the force-reference switch.
#include "mixtrain/core/cpu_features.h"

#include <cpuid.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace mixtrain {
namespace {

// XCR0 via XGETBV (inline asm so this file needs no -mxsave); 0 when the OS has not enabled
// XSAVE, which then correctly disables everything past SSE.
uint64_t read_xcr0() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
  if (!(ecx & (1u << 27))) return 0;  // OSXSAVE
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t{hi} << 32) | lo;
}

CpuFeatures detect() {
  __builtin_cpu_init();
  const uint64_t xcr0 = read_xcr0();
  // Belt and braces: libgcc checks XCR0 for AVX/AVX-512 too, but not every version does for AMX.
  const bool ymm_os = (xcr0 & 0x6) == 0x6;              // SSE + AVX state
  const bool zmm_os = ymm_os && (xcr0 & 0xe0) == 0xe0;  // opmask, ZMM_Hi256, Hi16_ZMM
  const bool amx_os = (xcr0 & 0x60000) == 0x60000;      // XTILECFG + XTILEDATA
  // CPUID leaf 7 for the features older compilers' __builtin_cpu_supports does not know (clang
  // 14 lacks f16c, avx512fp16 and amx-*): the same bits libgcc reads.
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0, a7 = 0, b7 = 0, c7 = 0, d7 = 0;
  __get_cpuid(1, &a1, &b1, &c1, &d1);
  __get_cpuid_count(7, 0, &a7, &b7, &c7, &d7);
  CpuFeatures f{};
  f.intel = __builtin_cpu_is("intel");
  f.avx2 = ymm_os && __builtin_cpu_supports("avx2");
  f.fma = ymm_os && __builtin_cpu_supports("fma");
  f.f16c = ymm_os && (c1 & (1u << 29));
  f.avx512f = zmm_os && __builtin_cpu_supports("avx512f");
  f.avx512bw = zmm_os && __builtin_cpu_supports("avx512bw");
  f.avx512vl = zmm_os && __builtin_cpu_supports("avx512vl");
  f.avx512_bf16 = zmm_os && __builtin_cpu_supports("avx512bf16");
  f.avx512_fp16 = zmm_os && (d7 & (1u << 23));
  f.amx_tile = amx_os && (d7 & (1u << 24));
  f.amx_bf16 = amx_os && f.amx_tile && (d7 & (1u << 22));
  f.amx_int8 = amx_os && f.amx_tile && (d7 & (1u << 25));
  f.avx512_vnni = zmm_os && (c7 & (1u << 11));
  unsigned a71 = 0, b71 = 0, c71 = 0, d71 = 0;
  __get_cpuid_count(7, 1, &a71, &b71, &c71, &d71);
  f.avx_vnni = ymm_os && (a71 & (1u << 4));
  return f;
}

bool env_force_reference() {
  const char* v = std::getenv("MIXTRAIN_FORCE_REFERENCE");
  return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

std::atomic<bool>& force_reference_flag() {
  static std::atomic<bool> flag{env_force_reference()};
  return flag;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

bool force_reference() { return force_reference_flag().load(std::memory_order_relaxed); }
void set_force_reference(bool on) { force_reference_flag().store(on, std::memory_order_relaxed); }

}  // namespace mixtrain
