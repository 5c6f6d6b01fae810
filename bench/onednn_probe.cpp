// oneDNN's matmul alone (bench/onednn_versions.sh): GF/s per shape and kind, plain row-major
// operands, fp32 output, compiled against oneDNN 2.x or 3.x (one program per library). Kinds:
// f32; f32 with fpmath mode bf16 (3.x may run it on the bf16 units); bf16; f16; and bf16/f16 with
// the weights in the layout the primitive prefers (format_tag::any, reordered once, untimed).
// Usage: onednn_probe [KIND]; prints "M N K KIND GF/s IMPL" per line ("unimplemented" if none).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <vector>

using ddt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

namespace {

struct Kind {
  const char* name;
  ddt type;
  bool fpmath_bf16, any_weights;
};

// Values in [-1, 1) of a simple sequence, in the operand's dtype (f32, or its top 16 bits for bf16,
// or the f16 conversion): what the data is does not matter for speed but for subnormals.
void fill(void* p, ddt t, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float x = static_cast<float>((i * 2654435761u) % 2048) / 1024.f - 1.f;
    if (t == ddt::f32) {
      static_cast<float*>(p)[i] = x;
    } else if (t == ddt::bf16) {
      uint32_t u;
      std::memcpy(&u, &x, 4);
      static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(u >> 16);
    } else {
      static_cast<_Float16*>(p)[i] = static_cast<_Float16>(x);
    }
  }
}

dnnl::matmul::primitive_desc make_pd(const dnnl::engine& eng, const dnnl::memory::desc& a,
                                     const dnnl::memory::desc& b, const dnnl::memory::desc& c,
                                     const dnnl::primitive_attr& attr) {
#if DNNL_VERSION_MAJOR >= 3
  return dnnl::matmul::primitive_desc(eng, a, b, c, attr);
#else
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, eng);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  struct Shape {
    int64_t m, n, k;
  };
  // gpt-mini's GEMMs at batch 16 x 256 tokens (C 384: qkv, proj, fc, fc-proj), and square ones.
  const std::vector<Shape> shapes = {{2048, 2048, 2048}, {4096, 1152, 384}, {4096, 384, 384},
                                     {4096, 1536, 384},  {4096, 384, 1536}, {4096, 256, 256},
                                     {256, 256, 4096}};
  const std::vector<Kind> kinds = {
      {"f32", ddt::f32, false, false},       {"f32+fpmath_bf16", ddt::f32, true, false},
      {"bf16", ddt::bf16, false, false},     {"f16", ddt::f16, false, false},
      {"bf16-anyB", ddt::bf16, false, true}, {"f16-anyB", ddt::f16, false, true}};
  const char* only = argc > 1 ? argv[1] : nullptr;
  for (const Shape& sh : shapes) {
    for (const Kind& kd : kinds) {
      if (only && std::strcmp(only, kd.name) != 0) continue;
      const dnnl::memory::desc a({sh.m, sh.k}, kd.type, tag::ab), b_plain({sh.k, sh.n}, kd.type, tag::ab),
          c({sh.m, sh.n}, ddt::f32, tag::ab);
      const dnnl::memory::desc b_any({sh.k, sh.n}, kd.type, kd.any_weights ? tag::any : tag::ab);
      dnnl::primitive_attr attr;
      if (kd.fpmath_bf16) attr.set_fpmath_mode(dnnl::fpmath_mode::bf16);
      dnnl::matmul mm;
      std::string impl;
      dnnl::memory::desc b_md;
      try {
        const dnnl::matmul::primitive_desc pd = make_pd(eng, a, b_any, c, attr);
        impl = pd.impl_info_str();
        b_md = pd.weights_desc();
        mm = dnnl::matmul(pd);
      } catch (const dnnl::error&) {
        std::printf("%ld %ld %ld %s: unimplemented\n", static_cast<long>(sh.m), static_cast<long>(sh.n),
                    static_cast<long>(sh.k), kd.name);
        continue;
      }
      dnnl::memory A(a, eng), Bp(b_plain, eng), B(b_md, eng), C(c, eng);
      fill(A.get_data_handle(), kd.type, static_cast<size_t>(sh.m * sh.k));
      fill(Bp.get_data_handle(), kd.type, static_cast<size_t>(sh.k * sh.n));
      dnnl::reorder(Bp, B).execute(s, Bp, B);  // the weights in the primitive's layout, once
      s.wait();
      auto run = [&] {
        mm.execute(s, {{DNNL_ARG_SRC, A}, {DNNL_ARG_WEIGHTS, B}, {DNNL_ARG_DST, C}});
        s.wait();
      };
      run();
      const double flop =
          2.0 * static_cast<double>(sh.m) * static_cast<double>(sh.n) * static_cast<double>(sh.k);
      const int reps = std::max(3, static_cast<int>(4e10 / flop));
      const auto t0 = std::chrono::steady_clock::now();
      for (int r = 0; r < reps; ++r) run();
      const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
      std::printf("%ld %ld %ld %s %.0f GF/s %s\n", static_cast<long>(sh.m), static_cast<long>(sh.n),
                  static_cast<long>(sh.k), kd.name, flop / sec / 1e9, impl.c_str());
    }
  }
}
