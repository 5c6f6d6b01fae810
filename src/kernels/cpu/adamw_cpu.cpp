// AdamW's flat kernels (kernels/optimizer_kernels.h): the fp32 reference and fast version, and
// on 16-bit parameters, gradients and moments (the *-true modes) the scalar reference and the
// OpenMP version. The 16-bit ones run the fp32 AdamW update (adamw_span.h) on values loaded from
// 16 bits and round the results back as optim/lowp.h describes, so a 16-bit step differs from an
// fp32 step on the same (16-bit representable) inputs only by the final rounding. The fast fp32
// kernel (SSE2, 4 lanes, OpenMP over fixed pieces) does the same IEEE operations in the same
// order as the reference, so it is bit-identical.
#include <cstdint>
#include <vector>

#include "kernels/cpu/adamw_span.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/lowp_span.h"
#include "kernels/optimizer_ops.h"
#include "mixtrain/core/cpu_features.h"
#include "mixtrain/kernels/optimizer_kernels.h"

namespace mixtrain {

void adamw_update_ref(float* p, const float* g, float* m, float* v, const std::vector<FlatSpan>& spans,
                      const AdamWScalars& s, const WorkingCopyOut& working) {
  const bool small_w = optim_detail::lerp_weight_small(s.beta1_weight);
  for (const FlatSpan& sp : spans) {
    const int64_t o = sp.offset;
    optim_detail::adamw_span_ref_f32(p + o, g + o, m + o, v + o, sp.numel, sp.decay, small_w, s);
    write_working_copy(p, working, o, sp.numel);
  }
}

void adamw_update(float* p, const float* g, float* m, float* v, const std::vector<FlatSpan>& spans,
                  const AdamWScalars& s, const WorkingCopyOut& working) {
  const bool small_w = optim_detail::lerp_weight_small(s.beta1_weight);
  optim_detail::for_each_piece(spans, [&](const FlatSpan& sp) {
    const int64_t o = sp.offset;
    optim_detail::adamw_span_fast_f32(p + o, g + o, m + o, v + o, sp.numel, sp.decay, small_w, s);
    write_working_copy(p, working, o, sp.numel);  // the piece is still in cache
  });
}

namespace {

using optim_detail::Lowp;

// UpdateRounding::master: the fp32 update of the master p from 16-bit gradients, the 16-bit
// parameters (`working`) rounded from it. The oracle loads one gradient at a time.
template <class T>
void adamw_master_ref(float* p, const T* g, float* m, float* v, const std::vector<FlatSpan>& spans,
                      const AdamWScalars& s, const WorkingCopyOut& working) {
  optim_detail::check_master_out(working, dtype_of<T>::value, "adamw_update_ref");
  const bool small_w = optim_detail::lerp_weight_small(s.beta1_weight);
  for (const FlatSpan& sp : spans) {
    optim_detail::adamw_dispatch(sp.decay, small_w, [&]<bool Decay, bool SmallW>() {
      for (int64_t i = sp.offset; i < sp.offset + sp.numel; ++i)
        optim_detail::adamw_element<Decay, SmallW>(p[i], Lowp<T>::load(g[i]), m[i], v[i], s);
    });
    write_working_copy(p, working, sp.offset, sp.numel);
  }
}

// OpenMP over fixed pieces; each piece's gradients loaded to fp32 in chunks for the SSE2 span.
template <class T>
void adamw_master_fast(float* p, const T* g, float* m, float* v, const std::vector<FlatSpan>& spans,
                       const AdamWScalars& s, const WorkingCopyOut& working) {
  optim_detail::check_master_out(working, dtype_of<T>::value, "adamw_update");
  const bool small_w = optim_detail::lerp_weight_small(s.beta1_weight);
  optim_detail::for_each_piece(spans, [&](const FlatSpan& sp) {
    optim_detail::master_span_fast(g, sp, [&](const float* gf, int64_t i0, int64_t n) {
      optim_detail::adamw_span_fast_f32(p + i0, gf, m + i0, v + i0, n, sp.decay, small_w, s);
    });
    write_working_copy(p, working, sp.offset, sp.numel);  // the piece is still in cache
  });
}

}  // namespace

void adamw_update_ref(float* p, const bf16* g, float* m, float* v, const std::vector<FlatSpan>& spans,
                      const AdamWScalars& s, const WorkingCopyOut& working) {
  adamw_master_ref(p, g, m, v, spans, s, working);
}
void adamw_update(float* p, const bf16* g, float* m, float* v, const std::vector<FlatSpan>& spans,
                  const AdamWScalars& s, const WorkingCopyOut& working) {
  adamw_master_fast(p, g, m, v, spans, s, working);
}
void adamw_update_ref(float* p, const fp16* g, float* m, float* v, const std::vector<FlatSpan>& spans,
                      const AdamWScalars& s, const WorkingCopyOut& working) {
  adamw_master_ref(p, g, m, v, spans, s, working);
}
void adamw_update(float* p, const fp16* g, float* m, float* v, const std::vector<FlatSpan>& spans,
                  const AdamWScalars& s, const WorkingCopyOut& working) {
  adamw_master_fast(p, g, m, v, spans, s, working);
}

namespace {

// The oracle: one element at a time, in flat order.
template <class T>
void adamw_lowp_ref(T* p, const T* g, T* m, T* v, T* c, const std::vector<FlatSpan>& spans,
                    const AdamWScalars& s, const LowpWrite& w) {
  optim_detail::check_lowp_write(c, w, "adamw_update_ref");
  const bool small_w = optim_detail::lerp_weight_small(s.beta1_weight);
  for (const FlatSpan& sp : spans) {
    optim_detail::adamw_dispatch(sp.decay, small_w, [&]<bool Decay, bool SmallW>() {
      for (int64_t i = sp.offset; i < sp.offset + sp.numel; ++i) {
        const float old = Lowp<T>::load(p[i]);
        float pf = old, mf = Lowp<T>::load(m[i]), vf = Lowp<T>::load(v[i]);
        optim_detail::adamw_element<Decay, SmallW>(pf, Lowp<T>::load(g[i]), mf, vf, s);
        m[i] = Lowp<T>::nearest(mf);
        v[i] = Lowp<T>::nearest(vf);
        p[i] = optim_detail::write_param_ref(old, pf, c, w, i);
      }
    });
  }
}

// OpenMP over fixed pieces; each piece in fp32 chunks through the SSE2 span kernel.
template <class T>
void adamw_lowp_fast(T* p, const T* g, T* m, T* v, T* c, const std::vector<FlatSpan>& spans,
                     const AdamWScalars& s, const LowpWrite& w) {
  optim_detail::check_lowp_write(c, w, "adamw_update");
  const bool small_w = optim_detail::lerp_weight_small(s.beta1_weight);
  optim_detail::for_each_piece(spans, [&](const FlatSpan& sp) {
    optim_detail::lowp_span_fast(p, g, m, v, c, sp, w,
                                 [&](float* pf, const float* gf, float* mf, float* vf, int64_t n) {
                                   optim_detail::adamw_span_fast_f32(pf, gf, mf, vf, n, sp.decay, small_w, s);
                                 });
  });
}

}  // namespace

void adamw_update_ref(bf16* p, const bf16* g, bf16* m, bf16* v, bf16* c, const std::vector<FlatSpan>& spans,
                      const AdamWScalars& s, const LowpWrite& w) {
  adamw_lowp_ref(p, g, m, v, c, spans, s, w);
}
void adamw_update(bf16* p, const bf16* g, bf16* m, bf16* v, bf16* c, const std::vector<FlatSpan>& spans,
                  const AdamWScalars& s, const LowpWrite& w) {
  adamw_lowp_fast(p, g, m, v, c, spans, s, w);
}
void adamw_update_ref(fp16* p, const fp16* g, fp16* m, fp16* v, fp16* c, const std::vector<FlatSpan>& spans,
                      const AdamWScalars& s, const LowpWrite& w) {
  adamw_lowp_ref(p, g, m, v, c, spans, s, w);
}
void adamw_update(fp16* p, const fp16* g, fp16* m, fp16* v, fp16* c, const std::vector<FlatSpan>& spans,
                  const AdamWScalars& s, const LowpWrite& w) {
  adamw_lowp_fast(p, g, m, v, c, spans, s, w);
}

namespace {
template <bool Ref, class T>
void adamw_master(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const std::vector<FlatSpan>& spans,
                  const AdamWScalars& s, const WorkingCopyOut& working) {
  if (Ref || force_reference())
    adamw_update_ref(p.data<float>(), g.data<T>(), m.data<float>(), v.data<float>(), spans, s, working);
  else
    adamw_update(p.data<float>(), g.data<T>(), m.data<float>(), v.data<float>(), spans, s, working);
}

template <bool Ref, class T>
void adamw_lowp(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, Tensor& c,
                const std::vector<FlatSpan>& spans, const AdamWScalars& s, const LowpWrite& w) {
  T* cc = c.defined() ? c.data<T>() : nullptr;
  if (Ref || force_reference())
    adamw_update_ref(p.data<T>(), g.data<T>(), m.data<T>(), v.data<T>(), cc, spans, s, w);
  else
    adamw_update(p.data<T>(), g.data<T>(), m.data<T>(), v.data<T>(), cc, spans, s, w);
}

// The tensor-level update: the flat kernel for the parameters' and gradients' dtypes; Ref: the
// scalar loops (the op's reference), else the fast ones (or the scalar loops when
// force_reference() is on).
template <bool Ref>
void adamw_tensors(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, Tensor& c,
                   const std::vector<FlatSpan>& spans, const AdamWScalars& s, const LowpWrite& w,
                   const WorkingCopyOut& working) {
  switch (p.dtype()) {
    case DType::f32:
      if (g.dtype() == DType::bf16) return adamw_master<Ref, bf16>(p, g, m, v, spans, s, working);
      if (g.dtype() == DType::f16) return adamw_master<Ref, fp16>(p, g, m, v, spans, s, working);
      if (Ref || force_reference())
        adamw_update_ref(p.data<float>(), g.data<float>(), m.data<float>(), v.data<float>(), spans, s,
                         working);
      else
        mixtrain::adamw_update(p.data<float>(), g.data<float>(), m.data<float>(), v.data<float>(), spans, s,
                               working);
      return;
    case DType::bf16:
      return adamw_lowp<Ref, bf16>(p, g, m, v, c, spans, s, w);
    case DType::f16:
      return adamw_lowp<Ref, fp16>(p, g, m, v, c, spans, s, w);
    default:
      throw DTypeError("adamw_update: parameters must be f32, bf16 or f16, got " + p.to_string());
  }
}
}  // namespace

void cpu::adamw_update(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, Tensor& c,
                       const std::vector<FlatSpan>& spans, const AdamWScalars& s, const LowpWrite& w,
                       const WorkingCopyOut& working) {
  adamw_tensors<false>(p, g, m, v, c, spans, s, w, working);
}

void ref::adamw_update(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, Tensor& c,
                       const std::vector<FlatSpan>& spans, const AdamWScalars& s, const LowpWrite& w,
                       const WorkingCopyOut& working) {
  adamw_tensors<true>(p, g, m, v, c, spans, s, w, working);
}

}  // namespace mixtrain
