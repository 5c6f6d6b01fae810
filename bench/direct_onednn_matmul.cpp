// The benchmarks' yardstick: a oneDNN matmul made directly (bench/direct_onednn_matmul.h).
#include "direct_onednn_matmul.h"

#include <oneapi/dnnl/dnnl.hpp>
#include <sstream>

namespace mixtrain {
namespace bench {

using ddt = dnnl::memory::data_type;

namespace {
// A plain matmul's primitive descriptor in either API (oneDNN 3.x dropped the op descriptor).
dnnl::matmul::primitive_desc matmul_pd(const dnnl::engine& eng, const dnnl::memory::desc& a,
                                       const dnnl::memory::desc& b, const dnnl::memory::desc& c) {
#if DNNL_VERSION_MAJOR >= 3
  return dnnl::matmul::primitive_desc(eng, a, b, c);
#else
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), eng);
#endif
}
}  // namespace

struct DirectOnednnMatmul::Impl {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::matmul mm;
  dnnl::memory a, b, c;
  // A 16-bit dtype without a matmul for it on this CPU (f16 without AVX512-FP16; bf16 on AVX2-only
  // CPUs such as AMD Zen 3): reorders into f32 copies first.
  bool reorder = false;
  dnnl::reorder ra, rb;
  dnnl::memory a32, b32;
  std::string name;
};

DirectOnednnMatmul::DirectOnednnMatmul(DType in, int64_t m, int64_t n, int64_t k, void* a, void* b, float* c)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  const ddt t = in == DType::f32 ? ddt::f32 : in == DType::bf16 ? ddt::bf16 : ddt::f16;
  using tag = dnnl::memory::format_tag;
  const dnnl::memory::desc a_md({m, k}, t, tag::ab), b_md({k, n}, t, tag::ab),
      c_md({m, n}, ddt::f32, tag::ab);
  s.a = dnnl::memory(a_md, s.eng, a);
  s.b = dnnl::memory(b_md, s.eng, b);
  s.c = dnnl::memory(c_md, s.eng, c);
  try {
    const dnnl::matmul::primitive_desc pd = matmul_pd(s.eng, a_md, b_md, c_md);
    s.mm = dnnl::matmul(pd);
    s.name = pd.impl_info_str();
    return;
  } catch (const dnnl::error&) {
    if (in == DType::f32) throw;
  }
  s.reorder = true;
  const dnnl::memory::desc a32_md({m, k}, ddt::f32, tag::ab), b32_md({k, n}, ddt::f32, tag::ab);
  s.a32 = dnnl::memory(a32_md, s.eng);
  s.b32 = dnnl::memory(b32_md, s.eng);
  s.ra = dnnl::reorder(s.a, s.a32);
  s.rb = dnnl::reorder(s.b, s.b32);
  const dnnl::matmul::primitive_desc pd = matmul_pd(s.eng, a32_md, b32_md, c_md);
  s.mm = dnnl::matmul(pd);
  s.name = std::string("reorder ") + (in == DType::f16 ? "f16" : "bf16") + "->f32 + " + pd.impl_info_str();
}

DirectOnednnMatmul::~DirectOnednnMatmul() = default;

void DirectOnednnMatmul::run() {
  Impl& s = *impl_;
  if (s.reorder) {
    s.ra.execute(s.strm, s.a, s.a32);
    s.rb.execute(s.strm, s.b, s.b32);
    s.mm.execute(s.strm, {{DNNL_ARG_SRC, s.a32}, {DNNL_ARG_WEIGHTS, s.b32}, {DNNL_ARG_DST, s.c}});
  } else {
    s.mm.execute(s.strm, {{DNNL_ARG_SRC, s.a}, {DNNL_ARG_WEIGHTS, s.b}, {DNNL_ARG_DST, s.c}});
  }
  s.strm.wait();
}

std::string DirectOnednnMatmul::impl() const { return impl_->name; }

}  // namespace bench

}  // namespace mixtrain
