// The autocast policy: one entry per autograd op, in one table (STYLE lesson 8). Sorted into
// torch.autocast's lists (aten/src/ATen/autocast_mode.cpp; shared/reference/amp-semantics.md).
#include <array>

#include "mixtrain/amp/autocast.h"

namespace mixtrain {
namespace {

using autograd::OpKind;

struct PolicyEntry {
  OpKind op;
  CastPolicy policy;
};

// Indexed by OpKind (the static_asserts below keep it in step with the enum and with
// backward_rules.cpp's table).
constexpr std::array<PolicyEntry, autograd::kNumOpKinds> kPolicy = {{
    {OpKind::matmul, CastPolicy::lower_precision},  // mm / bmm / matmul (incl. q k^T and att v)
    {OpKind::linear, CastPolicy::lower_precision},  // linear: x, weight and bias all cast
    {OpKind::add, CastPolicy::promote},             // ordinary type promotion: bf16 + f32 -> f32
    {OpKind::mul, CastPolicy::promote},             //   (residual stream stays in f32)
    {OpKind::scale, CastPolicy::keep},              // tensor * python scalar: input's type
    {OpKind::gelu, CastPolicy::keep},               // not in torch's lists
    {OpKind::layer_norm, CastPolicy::fp32},         // fp32 list; output f32
    {OpKind::embedding, CastPolicy::keep},          // not in torch's lists: the weight's dtype
    {OpKind::causal_softmax, CastPolicy::fp32},     // softmax: "fp32 unless a dtype is given"
    {OpKind::cross_entropy, CastPolicy::fp32},      // every loss is in the fp32 list
    {OpKind::reshape, CastPolicy::keep},            // views / layout ops
    {OpKind::split_heads, CastPolicy::keep},
    {OpKind::merge_heads, CastPolicy::keep},
    {OpKind::dropout, CastPolicy::keep},
    {OpKind::cast, CastPolicy::keep},                  // an explicit dtype is never autocast
    {OpKind::attention, CastPolicy::lower_precision},  // scaled_dot_product_attention (softmax in f32 inside)
    {OpKind::attention_qkv, CastPolicy::lower_precision},
    {OpKind::checkpoint, CastPolicy::keep},  // the ops inside cast for themselves
    {OpKind::gelu_erf, CastPolicy::keep},    // gelu, tanh, relu: not in torch's lists
    {OpKind::tanh, CastPolicy::keep},
    {OpKind::relu, CastPolicy::keep},
    {OpKind::masked_softmax, CastPolicy::lower_precision},  // the encoder's attention softmax: as the
    // attention op (torch's scaled_dot_product_attention runs in lower precision), probabilities
    // stored once in 16 bits, for backward and for p v alike; the softmax math is fp32 inside
    {OpKind::masked_attention, CastPolicy::lower_precision},  // the same attention fused: q, k, v
    // and every intermediate in the compute dtype, as the unfused ops store them
    {OpKind::masked_attention_qkv, CastPolicy::lower_precision},  // the same on qkv
    {OpKind::fp8_linear, CastPolicy::lower_precision},            // as linear: its GEMMs then quantize to fp8
    {OpKind::lm_head_loss, CastPolicy::lower_precision},          // the head's GEMMs as matmul; the loss in
    // fp32 inside, as cross_entropy's fp32 policy computes it from the 16-bit logits
    {OpKind::backward_hook, CastPolicy::keep},  // an identity
}};

constexpr bool table_in_order() {
  for (size_t i = 0; i < kPolicy.size(); ++i)
    if (static_cast<size_t>(kPolicy[i].op) != i) return false;
  return true;
}
static_assert(kPolicy.size() == autograd::kNumOpKinds, "one autocast policy per OpKind");
static_assert(table_in_order(), "kPolicy rows must follow the OpKind order");

}  // namespace

CastPolicy autocast_policy(autograd::OpKind op) { return kPolicy[static_cast<size_t>(op)].policy; }

std::string_view cast_policy_name(CastPolicy p) {
  switch (p) {
    case CastPolicy::lower_precision:
      return "lower_precision";
    case CastPolicy::fp32:
      return "fp32";
    case CastPolicy::promote:
      return "promote";
    case CastPolicy::keep:
      return "keep";
  }
  return "?";
}

}  // namespace mixtrain
