// bf16 GEMM blocks on the CPU's matrix unit (AMX-BF16 tiles) for our own fused kernels (the
// fused causal attention, attention_fused_cpu.cpp), with the scalar reference of the same
// contract beside it. oneDNN's matmul is the GEMM of everything else; it is not used here because
// the fused kernels run many small products (32-row blocks of one head) inside their own
// parallel loop, where a library call per block costs more than the block (oneDNN 3.2 has no
// public brgemm/ukernel API; 3.5 added one, experimental).
//
// The B operand is given "in pairs" (AMX's VNNI layout for bf16): element (k, n) of the K x N
// matrix B at Bp[(k / 2) * ldb + 2 * n + k % 2] (ldb >= 2 N, in bf16 elements): each 32-bit
// word holds two consecutive k of one column, which is what TDPBF16PS multiplies.
#pragma once
#include <cstdint>

#include "mixtrain/numeric/bf16.h"

namespace mixtrain::cpu::tiles {

// C (M x N f32, row stride ldc) = (accumulate ? C : 0) + A B, A (M x K bf16, row stride lda),
// B in pairs (above). M, N and K are multiples of 32. Every product of two bf16 values is exact
// in fp32, so the implementations differ only in the order of the fp32 sums.
using GemmFn = void (*)(int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda, const bf16* Bp,
                        int64_t ldb, float* C, int64_t ldc, bool accumulate);

// The kernel set a fused kernel runs with: begin() before a thread's first gemm, end() after its
// last (loads and releases the tile configuration; nothing for the reference).
struct Kernels {
  void (*begin)();
  GemmFn gemm;
  void (*end)();
  const char* name;
};

// The scalar reference: for each (m, n), the fp32 sum over k in order of the exact products.
void gemm_ref(int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda, const bf16* Bp, int64_t ldb,
              float* C, int64_t ldc, bool accumulate);
const Kernels& reference_kernels();

// True where the CPU has AMX-BF16 and Linux granted this process the tile data state (asked
// once, with arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), as oneDNN asks).
bool amx_usable();
// AMX's: 32 x 32 blocks of C in four tiles, A and B two tiles each. Only where amx_usable().
const Kernels& amx_kernels();

// ---- packing (AVX-512 where the CPU has it, else scalar loops; tested against the index formulas) --
// B = X, X (K x N) row-major with row stride ldx, K even: the pairs of rows (2p, 2p + 1) interleaved.
void pack_pairs_rows(const bf16* X, int64_t ldx, int64_t K, int64_t N, bf16* Bp, int64_t ldb);
// B = X^T, X (N x K) row-major with row stride ldx, K, ldx and ldb even: element (k, n) is X[n][k].
void pack_pairs_cols(const bf16* X, int64_t ldx, int64_t N, int64_t K, bf16* Bp, int64_t ldb);
// Y (C x R, row stride ldy) = X^T, X (R x C, row stride ldx): 32-bit words (f32, or pairs of bf16).
void transpose32(const uint32_t* X, int64_t ldx, int64_t R, int64_t C, uint32_t* Y, int64_t ldy);
// Y (C x R bf16, row stride ldy, even) = X^T, X (R x C bf16, R even): through `pairs` (R x C bf16 of
// scratch) holding X's row pairs.
void transpose(const bf16* X, int64_t ldx, int64_t R, int64_t C, bf16* Y, int64_t ldy, bf16* pairs);

}  // namespace mixtrain::cpu::tiles
