// SGD's flat kernels (kernels/optimizer_kernels.h): the fp32 reference and OpenMP version, and on
// 16-bit parameters, gradients and momentum (the *-true modes) the scalar reference and the
// OpenMP version. The element loop (sgd_span.h) is one template per (decay, mode, nesterov), so
// each inner loop is branch-free and auto-vectorises; the 16-bit kernels run it on values loaded
// from 16 bits and round the results back as optim/lowp.h describes.
#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/lowp_span.h"
#include "kernels/cpu/sgd_span.h"
#include "kernels/optimizer_ops.h"
#include "mixtrain/core/cpu_features.h"
#include "mixtrain/kernels/optimizer_kernels.h"

namespace mixtrain {

namespace {
void sgd_one_span(float* p, const float* g, float* buf, const FlatSpan& sp, const SgdScalars& s,
                  const WorkingCopyOut& working) {
  const int64_t o = sp.offset;
  optim_detail::sgd_span_f32(p + o, g + o, buf ? buf + o : nullptr, sp.numel, sp.decay, s);
  write_working_copy(p, working, o, sp.numel);
}
}  // namespace

void sgd_update_ref(float* p, const float* g, float* buf, const std::vector<FlatSpan>& spans,
                    const SgdScalars& s, const WorkingCopyOut& working) {
  for (const FlatSpan& sp : spans) sgd_one_span(p, g, buf, sp, s, working);
}

void sgd_update(float* p, const float* g, float* buf, const std::vector<FlatSpan>& spans, const SgdScalars& s,
                const WorkingCopyOut& working) {
  optim_detail::for_each_piece(spans, [&](const FlatSpan& sp) { sgd_one_span(p, g, buf, sp, s, working); });
}

namespace {

using optim_detail::Lowp;

// UpdateRounding::master (see adamw_cpu.cpp): the oracle loads one gradient at a time.
template <class T>
void sgd_master_ref(float* p, const T* g, float* buf, const std::vector<FlatSpan>& spans, const SgdScalars& s,
                    const WorkingCopyOut& working) {
  optim_detail::check_master_out(working, dtype_of<T>::value, "sgd_update_ref");
  for (const FlatSpan& sp : spans) {
    for (int64_t i = sp.offset; i < sp.offset + sp.numel; ++i) {
      const float gf = Lowp<T>::load(g[i]);
      optim_detail::sgd_span_f32(p + i, &gf, buf ? buf + i : nullptr, 1, sp.decay, s);
    }
    write_working_copy(p, working, sp.offset, sp.numel);
  }
}

template <class T>
void sgd_master_fast(float* p, const T* g, float* buf, const std::vector<FlatSpan>& spans,
                     const SgdScalars& s, const WorkingCopyOut& working) {
  optim_detail::check_master_out(working, dtype_of<T>::value, "sgd_update");
  optim_detail::for_each_piece(spans, [&](const FlatSpan& sp) {
    optim_detail::master_span_fast(g, sp, [&](const float* gf, int64_t i0, int64_t n) {
      optim_detail::sgd_span_f32(p + i0, gf, buf ? buf + i0 : nullptr, n, sp.decay, s);
    });
    write_working_copy(p, working, sp.offset, sp.numel);
  });
}

}  // namespace

void sgd_update_ref(float* p, const bf16* g, float* buf, const std::vector<FlatSpan>& spans,
                    const SgdScalars& s, const WorkingCopyOut& working) {
  sgd_master_ref(p, g, buf, spans, s, working);
}
void sgd_update(float* p, const bf16* g, float* buf, const std::vector<FlatSpan>& spans, const SgdScalars& s,
                const WorkingCopyOut& working) {
  sgd_master_fast(p, g, buf, spans, s, working);
}
void sgd_update_ref(float* p, const fp16* g, float* buf, const std::vector<FlatSpan>& spans,
                    const SgdScalars& s, const WorkingCopyOut& working) {
  sgd_master_ref(p, g, buf, spans, s, working);
}
void sgd_update(float* p, const fp16* g, float* buf, const std::vector<FlatSpan>& spans, const SgdScalars& s,
                const WorkingCopyOut& working) {
  sgd_master_fast(p, g, buf, spans, s, working);
}

namespace {

// The oracle: one element at a time, in flat order (the fp32 span loop on a single element).
template <class T>
void sgd_lowp_ref(T* p, const T* g, T* buf, T* c, const std::vector<FlatSpan>& spans, const SgdScalars& s,
                  const LowpWrite& w) {
  optim_detail::check_lowp_write(c, w, "sgd_update_ref");
  for (const FlatSpan& sp : spans) {
    for (int64_t i = sp.offset; i < sp.offset + sp.numel; ++i) {
      const float old = Lowp<T>::load(p[i]), gf = Lowp<T>::load(g[i]);
      float pf = old, bf = buf ? Lowp<T>::load(buf[i]) : 0.f;
      optim_detail::sgd_span_f32(&pf, &gf, buf ? &bf : nullptr, 1, sp.decay, s);
      if (buf) buf[i] = Lowp<T>::nearest(bf);
      p[i] = optim_detail::write_param_ref(old, pf, c, w, i);
    }
  }
}

// OpenMP over fixed pieces; each piece in fp32 chunks through the vectorised span loop.
template <class T>
void sgd_lowp_fast(T* p, const T* g, T* buf, T* c, const std::vector<FlatSpan>& spans, const SgdScalars& s,
                   const LowpWrite& w) {
  optim_detail::check_lowp_write(c, w, "sgd_update");
  optim_detail::for_each_piece(spans, [&](const FlatSpan& sp) {
    optim_detail::lowp_span_fast(p, g, buf, static_cast<T*>(nullptr), c, sp, w,
                                 [&](float* pf, const float* gf, float* bf, float*, int64_t n) {
                                   optim_detail::sgd_span_f32(pf, gf, bf, n, sp.decay, s);
                                 });
  });
}

}  // namespace

void sgd_update_ref(bf16* p, const bf16* g, bf16* buf, bf16* c, const std::vector<FlatSpan>& spans,
                    const SgdScalars& s, const LowpWrite& w) {
  sgd_lowp_ref(p, g, buf, c, spans, s, w);
}
void sgd_update(bf16* p, const bf16* g, bf16* buf, bf16* c, const std::vector<FlatSpan>& spans,
                const SgdScalars& s, const LowpWrite& w) {
  sgd_lowp_fast(p, g, buf, c, spans, s, w);
}
void sgd_update_ref(fp16* p, const fp16* g, fp16* buf, fp16* c, const std::vector<FlatSpan>& spans,
                    const SgdScalars& s, const LowpWrite& w) {
  sgd_lowp_ref(p, g, buf, c, spans, s, w);
}
void sgd_update(fp16* p, const fp16* g, fp16* buf, fp16* c, const std::vector<FlatSpan>& spans,
                const SgdScalars& s, const LowpWrite& w) {
  sgd_lowp_fast(p, g, buf, c, spans, s, w);
}

namespace {
template <bool Ref, class T>
void sgd_master(Tensor& p, const Tensor& g, float* buf, const std::vector<FlatSpan>& spans,
                const SgdScalars& s, const WorkingCopyOut& working) {
  if (Ref || force_reference())
    sgd_update_ref(p.data<float>(), g.data<T>(), buf, spans, s, working);
  else
    sgd_update(p.data<float>(), g.data<T>(), buf, spans, s, working);
}

template <bool Ref, class T>
void sgd_lowp(Tensor& p, const Tensor& g, Tensor& buf, Tensor& c, const std::vector<FlatSpan>& spans,
              const SgdScalars& s, const LowpWrite& w) {
  T* b = buf.defined() ? buf.data<T>() : nullptr;
  T* cc = c.defined() ? c.data<T>() : nullptr;
  if (Ref || force_reference())
    sgd_update_ref(p.data<T>(), g.data<T>(), b, cc, spans, s, w);
  else
    sgd_update(p.data<T>(), g.data<T>(), b, cc, spans, s, w);
}

// The tensor-level update (as adamw_tensors in adamw_cpu.cpp): Ref, the scalar loops.
template <bool Ref>
void sgd_tensors(Tensor& p, const Tensor& g, Tensor& buf, Tensor& c, const std::vector<FlatSpan>& spans,
                 const SgdScalars& s, const LowpWrite& w, const WorkingCopyOut& working) {
  switch (p.dtype()) {
    case DType::f32: {
      float* b = buf.defined() ? buf.data<float>() : nullptr;
      if (g.dtype() == DType::bf16) return sgd_master<Ref, bf16>(p, g, b, spans, s, working);
      if (g.dtype() == DType::f16) return sgd_master<Ref, fp16>(p, g, b, spans, s, working);
      if (Ref || force_reference())
        sgd_update_ref(p.data<float>(), g.data<float>(), b, spans, s, working);
      else
        mixtrain::sgd_update(p.data<float>(), g.data<float>(), b, spans, s, working);
      return;
    }
    case DType::bf16:
      return sgd_lowp<Ref, bf16>(p, g, buf, c, spans, s, w);
    case DType::f16:
      return sgd_lowp<Ref, fp16>(p, g, buf, c, spans, s, w);
    default:
      throw DTypeError("sgd_update: parameters must be f32, bf16 or f16, got " + p.to_string());
  }
}
}  // namespace

void cpu::sgd_update(Tensor& p, const Tensor& g, Tensor& buf, Tensor& c, const std::vector<FlatSpan>& spans,
                     const SgdScalars& s, const LowpWrite& w, const WorkingCopyOut& working) {
  sgd_tensors<false>(p, g, buf, c, spans, s, w, working);
}

void ref::sgd_update(Tensor& p, const Tensor& g, Tensor& buf, Tensor& c, const std::vector<FlatSpan>& spans,
                     const SgdScalars& s, const LowpWrite& w, const WorkingCopyOut& working) {
  sgd_tensors<true>(p, g, buf, c, spans, s, w, working);
}

}  // namespace mixtrain
