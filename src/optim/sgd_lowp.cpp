// SGD on 16-bit parameters, gradients and momentum (the *-true modes): the scalar reference and
// the OpenMP version. Both run the fp32 SGD update (optim/sgd_kernel.h) on values loaded from 16
// bits and round the results back as optim/lowp.h describes.
#include <cstdint>
#include <vector>

#include "mixtrain/optim/sgd.h"
#include "optim/lowp_kernel.h"
#include "optim/sgd_kernel.h"

namespace mixtrain {

namespace {

using optim_detail::Lowp;

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
void sgd_update(bf16* p, const bf16* g, bf16* buf, bf16* c, const std::vector<FlatSpan>& spans, const SgdScalars& s,
                const LowpWrite& w) {
  sgd_lowp_fast(p, g, buf, c, spans, s, w);
}
void sgd_update_ref(fp16* p, const fp16* g, fp16* buf, fp16* c, const std::vector<FlatSpan>& spans,
                    const SgdScalars& s, const LowpWrite& w) {
  sgd_lowp_ref(p, g, buf, c, spans, s, w);
}
void sgd_update(fp16* p, const fp16* g, fp16* buf, fp16* c, const std::vector<FlatSpan>& spans, const SgdScalars& s,
                const LowpWrite& w) {
  sgd_lowp_fast(p, g, buf, c, spans, s, w);
}

}  // namespace mixtrain
