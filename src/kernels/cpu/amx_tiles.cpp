// bf16 GEMM blocks on AMX tiles and their scalar reference (amx_tiles.h).
#include "kernels/cpu/amx_tiles.h"

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include "mixtrain/core/cpu_features.h"

// GCC 12's AVX-512 intrinsics (their _mm512_undefined operands) trip a false -Wuninitialized once
// inlined (GCC PR 105593, fixed in GCC 13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace mixtrain::cpu::tiles {

namespace {
float widen(bf16 v) { return std::bit_cast<float>(uint32_t{v.bits()} << 16); }
void nothing() {}
}  // namespace

void gemm_ref(int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda, const bf16* Bp, int64_t ldb,
              float* C, int64_t ldc, bool accumulate) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      float s = accumulate ? C[m * ldc + n] : 0.f;
      for (int64_t k = 0; k < K; ++k) s += widen(A[m * lda + k]) * widen(Bp[(k / 2) * ldb + 2 * n + k % 2]);
      C[m * ldc + n] = s;
    }
}

const Kernels& reference_kernels() {
  static const Kernels k{nothing, gemm_ref, nothing, "reference"};
  return k;
}

// ---- AMX ------------------------------------------------------------------------------------------
namespace {
// The tile configuration (palette 1): tiles 0-3 hold C (16 rows of 16 fp32), 4-5 A (16 rows of
// 32 bf16), 6-7 B (16 rows of 16 pairs): every tile 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64);

__attribute__((target("amx-tile"))) void amx_begin() {
  TileConfig cfg{};
  cfg.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  // LDTILECFG through asm with the whole struct as its memory operand: GCC 12's
  // _tile_loadconfig builtin does not tell the optimiser that it reads the 64 bytes, which then
  // dropped the stores to colsb and rows (the CPU faulted on the half-written configuration).
  __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}
__attribute__((target("amx-tile"))) void amx_end() { _tile_release(); }

// One 32 x 32 block of C per (m, n), K in steps of 32: TDPBF16PS adds, for each of the 16 rows
// of A's tile and each of the 16 columns of B's, the 32 products of a row of A with the 16 pairs
// of that column (fp32 accumulation in the tile).
__attribute__((target("amx-tile,amx-bf16"))) void amx_gemm(int64_t M, int64_t N, int64_t K, const bf16* A,
                                                           int64_t lda, const bf16* Bp, int64_t ldb, float* C,
                                                           int64_t ldc, bool accumulate) {
  const int64_t sa = lda * 2, sb = ldb * 2, sc = ldc * 4;  // row strides in bytes
  for (int64_t m = 0; m < M; m += 32)
    for (int64_t n = 0; n < N; n += 32) {
      float* c = C + m * ldc + n;
      if (accumulate) {
        _tile_loadd(0, c, sc);
        _tile_loadd(1, c + 16, sc);
        _tile_loadd(2, c + 16 * ldc, sc);
        _tile_loadd(3, c + 16 * ldc + 16, sc);
      } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
      }
      for (int64_t k = 0; k < K; k += 32) {
        const bf16* a = A + m * lda + k;
        const bf16* b = Bp + (k / 2) * ldb + 2 * n;
        _tile_loadd(4, a, sa);
        _tile_loadd(5, a + 16 * lda, sa);
        _tile_loadd(6, b, sb);
        _tile_loadd(7, b + 32, sb);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      _tile_stored(0, c, sc);
      _tile_stored(1, c + 16, sc);
      _tile_stored(2, c + 16 * ldc, sc);
      _tile_stored(3, c + 16 * ldc + 16, sc);
    }
}

bool request_tile_data() {
  const CpuFeatures& f = cpu_features();
  if (!f.amx_tile || !f.amx_bf16) return false;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}
}  // namespace

bool amx_usable() {
  static const bool usable = request_tile_data();
  return usable;
}

const Kernels& amx_kernels() {
  static const Kernels k{amx_begin, amx_gemm, amx_end, "amx"};
  return k;
}

// ---- packing --------------------------------------------------------------------------------------
namespace {
void pairs_rows_scalar(const uint16_t* x0, const uint16_t* x1, uint16_t* o, int64_t N) {
  for (int64_t n = 0; n < N; ++n) {
    o[2 * n] = x0[n];
    o[2 * n + 1] = x1[n];
  }
}
// 32 columns at a time: VPERMT2W takes element i of the pair from row 0 (index i) or row 1 (32 + i).
__attribute__((target("avx512f,avx512bw"))) void pairs_rows_avx512(const uint16_t* x0, const uint16_t* x1,
                                                                   uint16_t* o, int64_t N) {
  alignas(64) uint16_t lo[32], hi[32];
  for (int i = 0; i < 16; ++i) {
    lo[2 * i] = static_cast<uint16_t>(i);
    lo[2 * i + 1] = static_cast<uint16_t>(32 + i);
    hi[2 * i] = static_cast<uint16_t>(16 + i);
    hi[2 * i + 1] = static_cast<uint16_t>(48 + i);
  }
  const __m512i ilo = _mm512_load_si512(lo), ihi = _mm512_load_si512(hi);
  int64_t n = 0;
  for (; n + 32 <= N; n += 32) {
    const __m512i a = _mm512_loadu_si512(x0 + n), b = _mm512_loadu_si512(x1 + n);
    _mm512_storeu_si512(o + 2 * n, _mm512_permutex2var_epi16(a, ilo, b));
    _mm512_storeu_si512(o + 2 * n + 32, _mm512_permutex2var_epi16(a, ihi, b));
  }
  pairs_rows_scalar(x0 + n, x1 + n, o + 2 * n, N - n);
}

void transpose32_scalar(const uint32_t* X, int64_t ldx, int64_t R, int64_t C, uint32_t* Y, int64_t ldy) {
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) Y[c * ldy + r] = X[r * ldx + c];
}
// One 16 x 16 block of 32-bit words: 32-bit then 64-bit unpacks make, in each 128-bit lane L of
// u[4g + j], column 4L + j of rows 4g..4g+3; two rounds of lane shuffles gather the four lanes of
// one column.
__attribute__((target("avx512f"))) void transpose32_block(const uint32_t* X, int64_t ldx, uint32_t* Y,
                                                          int64_t ldy) {
  __m512i r[16], t[16], u[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(X + i * ldx);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int g = 0; g < 4; ++g) {
    const __m512i *a = t + 4 * g, *b = t + 4 * g + 2;
    u[4 * g] = _mm512_unpacklo_epi64(a[0], b[0]);
    u[4 * g + 1] = _mm512_unpackhi_epi64(a[0], b[0]);
    u[4 * g + 2] = _mm512_unpacklo_epi64(a[1], b[1]);
    u[4 * g + 3] = _mm512_unpackhi_epi64(a[1], b[1]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i v = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88),
                  w = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xDD);
    const __m512i v2 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x88),
                  w2 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xDD);
    _mm512_storeu_si512(Y + j * ldy, _mm512_shuffle_i32x4(v, v2, 0x88));
    _mm512_storeu_si512(Y + (8 + j) * ldy, _mm512_shuffle_i32x4(v, v2, 0xDD));
    _mm512_storeu_si512(Y + (4 + j) * ldy, _mm512_shuffle_i32x4(w, w2, 0x88));
    _mm512_storeu_si512(Y + (12 + j) * ldy, _mm512_shuffle_i32x4(w, w2, 0xDD));
  }
}
bool have_avx512bw() {
  static const bool v = cpu_features().avx512f && cpu_features().avx512bw;
  return v;
}
}  // namespace

void pack_pairs_rows(const bf16* X, int64_t ldx, int64_t K, int64_t N, bf16* Bp, int64_t ldb) {
  const auto* x = reinterpret_cast<const uint16_t*>(X);
  auto* o = reinterpret_cast<uint16_t*>(Bp);
  const auto f = have_avx512bw() ? pairs_rows_avx512 : pairs_rows_scalar;
  for (int64_t p = 0; p < K / 2; ++p) f(x + 2 * p * ldx, x + (2 * p + 1) * ldx, o + p * ldb, N);
}

void transpose32(const uint32_t* X, int64_t ldx, int64_t R, int64_t C, uint32_t* Y, int64_t ldy) {
  if (!have_avx512bw() || R % 16 != 0 || C % 16 != 0) return transpose32_scalar(X, ldx, R, C, Y, ldy);
  for (int64_t r = 0; r < R; r += 16)
    for (int64_t c = 0; c < C; c += 16) transpose32_block(X + r * ldx + c, ldx, Y + c * ldy + r, ldy);
}

// The pairs of X's row n are 32-bit words: B's row p is column p of X read as words.
void pack_pairs_cols(const bf16* X, int64_t ldx, int64_t N, int64_t K, bf16* Bp, int64_t ldb) {
  transpose32(reinterpret_cast<const uint32_t*>(X), ldx / 2, N, K / 2, reinterpret_cast<uint32_t*>(Bp),
              ldb / 2);
}

// Row c of X^T is column c of X: in X's row pairs (a word per column) it is a column of words.
void transpose(const bf16* X, int64_t ldx, int64_t R, int64_t C, bf16* Y, int64_t ldy, bf16* pairs) {
  pack_pairs_rows(X, ldx, R, C, pairs, 2 * C);
  transpose32(reinterpret_cast<const uint32_t*>(pairs), C, R / 2, C, reinterpret_cast<uint32_t*>(Y), ldy / 2);
}

}  // namespace mixtrain::cpu::tiles
