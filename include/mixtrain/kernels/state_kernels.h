// Optimizer state below fp32 (`--optim-state bf16|int8`): how a moment (AdamW's m and v, SGD's
// momentum) is stored, and the update kernels that read it to fp32, run the fp32 update of
// kernels/optimizer_kernels.h on it, and store it back. Parameters and gradients stay as the
// fp32 kernels take them (the fp32 arena of 32-true and of the *-mixed modes' masters, or the
// fp32 masters and 16-bit gradients of the *-true modes' master rounding).
//
//   bf16  every element in bf16, rounded back stochastically (numeric/stochastic.h): element i of
//         update k of moment j draws counter_rng(state_seed(seed, j), k * flat_numel + i), so
//         small changes of a moment survive in expectation (torchao's bf16 AdamW rounds its
//         moments the same way; unbiased, unlike round-to-nearest, which drops every change
//         below half a bf16 ulp: v with beta2 = 0.999 moves by 0.1% a step, under bf16's 0.4%).
//   int8  bitsandbytes' 8-bit state (Dettmers et al. 2021, "8-bit Optimizers via Block-wise
//         Quantization", arXiv 2110.02861; bitsandbytes 0.50 `Adam8bit` / `optimizer_update_8bit_
//         blockwise`): per block of 256 elements one fp32 absmax and one 8-bit code per element,
//         an index into the dynamic quantization map (signed for m and SGD's momentum, unsigned
//         for v); a code decodes to map[code] * absmax. Each update decodes the block to fp32,
//         runs the fp32 update (the parameter moves by the fp32 update of the decoded state), takes
//         the block's new absmax = max |x| and stores code(x * (1 / absmax)), clamped to [-1, 1]
//         (bitsandbytes' reference `quantize_blockwise`). Parameters with fewer than 4096 elements
//         keep fp32 state (bitsandbytes' `min_8bit_size`).
//         code(s): the map value nearest to s, exactly: the number of thresholds t_i below s,
//         t_i = (map[i] + map[i + 1]) / 2 in exact arithmetic, so a tie goes to the smaller code.
//         bitsandbytes takes the argmin of the fp32-rounded distances; the two differ only where
//         those roundings tie two codes. A block of zeros (absmax 0) stores the code of 0.
//         Blocks: bitsandbytes starts them at each tensor's first element; here they sit on the
//         flat arena's grid of 256 (block b: elements [256 b, 256 b + 256)), cut at the tensor's
//         ends, so a tensor's first and last block may be shorter. Why: ZeRO's shards (multiples of
//         4096 elements, optim/zero.h) then never cut a block, and a sharded update is the
//         unsharded one bit for bit.
// Every kernel has a scalar reference (_ref) and a fast version (OpenMP over pieces on the
// block grid, vectorised inside) bit-identical to it for any thread count.
#pragma once
#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "mixtrain/kernels/optimizer_kernels.h"
#include "mixtrain/numeric/bf16.h"
#include "mixtrain/numeric/fp16.h"

namespace mixtrain {

enum class StatePrecision : uint8_t { fp32, bf16, int8 };
// "fp32" | "bf16" | "int8"; ArgumentError "unknown optimizer state precision 'x' (valid: ...)".
StatePrecision parse_state_precision(std::string_view s);
std::string_view state_precision_name(StatePrecision p);

constexpr int64_t kInt8StateBlock = 256;      // bitsandbytes' blocksize for the 8-bit optimizers
constexpr int64_t kInt8StateMinNumel = 4096;  // bitsandbytes' min_8bit_size

// bitsandbytes' create_dynamic_map(signed, max_exponent_bits = 7, total_bits = 8): 256 values in
// [-1, 1] (signed) or [0, 1] (unsigned), ascending, with the thresholds of code().
struct DynamicMap {
  std::array<float, 256> value;      // ascending
  std::array<double, 255> midpoint;  // (value[i] + value[i + 1]) / 2, exact
  std::array<float, 255> below;      // s > below[i]  <=>  s > midpoint[i], for every float s
  uint8_t zero_code;                 // the code whose value is 0
};
const DynamicMap& dynamic_map(bool is_signed);
// The code of a scaled value s (the contract above): the reference counts the thresholds one by
// one; the fast kernels search them (bit-identical).
uint8_t dynamic_code_ref(const DynamicMap& map, float s);
uint8_t dynamic_code(bool is_signed, float s);

// One moment's storage for a shard of n elements (optim/moment_state.h owns the buffers).
struct MomentBuf {
  StatePrecision precision = StatePrecision::fp32;
  float* f32 = nullptr;      // fp32: (n); int8: the fp32 state of the small tensors, compact
  bf16* b16 = nullptr;       // bf16: (n)
  uint8_t* codes = nullptr;  // int8: (n), one per element (unused where the state is fp32)
  float* absmax = nullptr;   // int8: one per block of the quantized spans (state_blocks)
  bool is_signed = true;     // int8: which map
  uint64_t seed = 0;         // bf16: the stochastic-rounding stream of this moment
};
// The stream of moment j (0: m or SGD's momentum, 1: v) of an optimizer seeded with `seed`:
// distinct from the parameters' own stream (stochastic weight rounding) and from each other.
uint64_t state_seed(uint64_t seed, int j);

// A parameter's range of the shard (as FlatSpan: offsets into p, g and the per-element buffers)
// and where its int8 state lives: quantized (codes at the span's offset, absmax from block_offset
// on: one per grid cell the span touches), or fp32 at fallback_offset of MomentBuf::f32. For fp32
// and bf16 state the int8 fields are unused. A shard's buffers are the whole arena's cut at the
// shard's ends (every count is additive over shards, in rank order).
struct StateSpan {
  FlatSpan span;
  bool quantized = false;
  int64_t fallback_offset = 0;
  int64_t block_offset = 0;
};
// The spans of the parameters (whole_spans: one per parameter, arena offsets) inside shard
// [begin, end) (begin a multiple of 256), for state of precision p.
std::vector<StateSpan> state_spans(const std::vector<FlatSpan>& whole_spans, int64_t begin, int64_t end,
                                   StatePrecision p);
// Elements of the shard whose int8 state is fp32 (the length of MomentBuf::f32 for int8), and
// the blocks of its quantized spans (the length of MomentBuf::absmax).
int64_t fallback_numel(const std::vector<StateSpan>& spans);
int64_t state_blocks(const std::vector<StateSpan>& spans);
// Grid cells of 256 that [offset, offset + n) touches (offset on the shard's grid).
inline int64_t grid_cells(int64_t offset, int64_t n) {
  return n <= 0 ? 0 : (offset + n - 1) / kInt8StateBlock - offset / kInt8StateBlock + 1;
}

// AdamW / SGD over bf16 or int8 state: p (shard) f32, the parameters or the fp32 master weights of
// master rounding; g (shard) f32, or the 16-bit gradients of master rounding (each element loaded
// to fp32); m, v (AdamW), buf (SGD momentum) as above; `counter_base` = k * flat_numel + shard
// begin (the bf16 draws). The update of every element is the fp32 kernel's (optim/adamw.h,
// optim/sgd.h) on the state as decoded; `working` as for the fp32 kernels (under master rounding:
// the 16-bit parameters, rounded to nearest from the masters).
#define MIXTRAIN_DECLARE_STATE_KERNELS(G)                                                                    \
  void adamw_update_state_ref(float* p, const G* g, const MomentBuf& m, const MomentBuf& v,                  \
                              const std::vector<StateSpan>& spans, const AdamWScalars& s,                    \
                              uint64_t counter_base, const WorkingCopyOut& working = {});                    \
  void adamw_update_state(float* p, const G* g, const MomentBuf& m, const MomentBuf& v,                      \
                          const std::vector<StateSpan>& spans, const AdamWScalars& s, uint64_t counter_base, \
                          const WorkingCopyOut& working = {});                                               \
  void sgd_update_state_ref(float* p, const G* g, const MomentBuf& buf, const std::vector<StateSpan>& spans, \
                            const SgdScalars& s, uint64_t counter_base, const WorkingCopyOut& working = {}); \
  void sgd_update_state(float* p, const G* g, const MomentBuf& buf, const std::vector<StateSpan>& spans,     \
                        const SgdScalars& s, uint64_t counter_base, const WorkingCopyOut& working = {});
MIXTRAIN_DECLARE_STATE_KERNELS(float)
MIXTRAIN_DECLARE_STATE_KERNELS(bf16)
MIXTRAIN_DECLARE_STATE_KERNELS(fp16)
#undef MIXTRAIN_DECLARE_STATE_KERNELS

// Decoding for checkpoints' and tests' eyes: out (shard) f32 = the state as the next update will
// read it.
void decode_state(const MomentBuf& b, const std::vector<StateSpan>& spans, float* out);

}  // namespace mixtrain
