// Stochastic rounding fp32 -> bf16/fp16 and the counter-based RNG that feeds it. Rounding up
// with probability proportional to the distance keeps small updates alive in pure low-precision
// weights (Zamirai et al. 2020; llm.c's stochastic bf16 copy); the counter RNG makes element i's
// random bits a function of (seed, i) only, so results never depend on the thread count.
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>

#include "mixtrain/numeric/bf16.h"
#include "mixtrain/numeric/fp16.h"

namespace mixtrain {

namespace detail {
// splitmix64's output finaliser (Steele, Lea, Flood 2014); passes BigCrush.
constexpr uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ull;
// The per-seed key; hoisted out of bulk loops (counter_rng == counter_rng_keyed(key(seed), c)).
constexpr uint64_t counter_rng_key(uint64_t seed) { return splitmix64_mix(seed + kGoldenGamma); }
constexpr uint32_t counter_rng_keyed(uint64_t key, uint64_t counter) {
  return uint32_t(splitmix64_mix(key + (counter + 1) * kGoldenGamma) >> 32);
}
}  // namespace detail

// 32 random bits for position `counter` of stream `seed`: the counter-th output of splitmix64
// seeded with a hash of `seed`. Same (seed, counter) -> same bits, on any thread.
constexpr uint32_t counter_rng(uint64_t seed, uint64_t counter) {
  return detail::counter_rng_keyed(detail::counter_rng_key(seed), counter);
}

// fp32 -> bf16 rounding up (in magnitude) with probability (distance to the lower neighbour) /
// (gap between neighbours), using the low 16 of random_bits. Values already representable are
// unchanged. NaN and inf convert as bf16_from_f32 does; a finite value above the largest bf16
// rounds to inf with the same proportional probability (inf is the next value up).
constexpr bf16 bf16_from_f32_stochastic(float f, uint32_t random_bits) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) >= 0x7f800000u) return bf16_from_f32(f);
  // Add uniform noise below the kept bits, then truncate:
  //   S EEEEEEEE MMMMMMM | RRRRRRRRRRRRRRRR  +  0000...0 | rrrrrrrrrrrrrrrr
  // carries into the kept part with probability R / 2^16. Sign-magnitude makes this round away
  // from zero for negatives too, which is what proportional rounding of |x| means.
  return bf16::from_bits(uint16_t((x + (random_bits & 0xffffu)) >> 16));
}

// fp32 -> fp16 stochastic rounding. Normal results use the low 13 of random_bits; results in the
// subnormal range (where more than 13 bits are dropped) use all 32, so even values far below
// 2^-24 round up to it with probability |x| / 2^-24 (down to a resolution of 2^-32 of that).
// NaN and inf convert as fp16_from_f32; finite values past 65504 round to inf with the
// proportional probability and every value >= 65536 becomes inf.
constexpr fp16 fp16_from_f32_stochastic(float f, uint32_t random_bits) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) return fp16_from_f32(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t e = a >> 23;
  uint32_t code = 0;
  if (e >= 113) {
    // Normal fp16 range (>= 2^-14): rebias 127 -> 15, add noise to the 13 dropped bits, truncate.
    //   0 000eeeee mmmmmmmmmm|ddddddddddddd  +  rrrrrrrrrrrrr  ->  >> 13
    code = (a - (112u << 23) + (random_bits & 0x1fffu)) >> 13;
    if (code >= 0x7c00u) code = 0x7c00u;  // past 65504: inf
  } else if (e != 0) {
    // Subnormal fp16 range: code = m >> (126 - e) exactly as in fp16_from_f32, computed here as a
    // 32.32 fixed-point number so that the 32 random bits can be added below the binary point.
    //   m = 1MMMMMMMMMMMMMMMMMMMMMMM;  fixed = (m << 32) >> (126 - e);  code = (fixed + r) >> 32
    const uint64_t m = (a & 0x007fffffu) | 0x00800000u;
    const uint32_t s = 126 - e;  // >= 14
    const uint64_t fixed = s >= 64 ? 0 : (m << 32) >> s;
    code = uint32_t((fixed + random_bits) >> 32);  // at most 0x400, the smallest normal
  }
  // e == 0: fp32 subnormals are < 2^-126; the chance of rounding up is below 2^-100, i.e. zero
  // at 32 random bits.
  return fp16::from_bits(uint16_t(sign | code));
}

// Bulk stochastic conversion: element i uses counter_rng(seed, offset + i), so the output is the
// same for any OpenMP thread count and any split of the array into calls (pass the running
// offset). Parallel with OpenMP for large n.
void convert_f32_to_bf16_stochastic(const float* src, bf16* dst, size_t n, uint64_t seed, uint64_t offset);
void convert_f32_to_fp16_stochastic(const float* src, fp16* dst, size_t n, uint64_t seed, uint64_t offset);

}  // namespace mixtrain
