// cpu::gemm through oneDNN's matmul primitive (fp32 accumulation for f32 and bf16 inputs).
// The tensors' own memory is wrapped (no copies); transposes, leading dims and batch strides are
// expressed as explicit strides in the memory descriptors; alpha is an output scale, beta a sum
// post-op, the bias the matmul bias input (or, with alpha != 1, a binary-add post-op, because
// oneDNN scales the bias input by alpha). Primitives are cached per (shapes, strides, dtypes,
// attributes, threads) in an LRU map, so a training step's steady state creates none.
//
// Where oneDNN has no fast implementation for a combination, the problem is rewritten instead:
//   - a column-major c (a transposed output view) is computed as c^T = op(b)^T @ op(a)^T;
//   - an output dtype oneDNN cannot write (f32 -> bf16, bf16 -> f16, ...) goes through an f32
//     temporary (c copied in first when beta != 0) that is rounded once into c;
//   - fp16 inputs on a CPU without fp16 arithmetic (no avx512_fp16) are converted to fp32
//     (keeping their orientation, so transposes stay free) and run through the fp32 matmul;
//   - so are bf16 inputs where oneDNN's bf16 kernel is slower than its fp32 one (bf16_via_f32()).
//     Both conversions are exact (every fp16 and bf16 value is an fp32 value) and the 16-bit
//     kernels accumulate in fp32 too: only the summation order differs (and the fp32 kernel keeps
//     the subnormals that VDPBF16PS flushes);
//   - on request (MIXTRAIN_F16_GEMM=bf16x4, f16_route()), fp16 inputs are split into bf16 parts,
//     x = hi + lo exactly, and run as one bf16 GEMM over 4K: [ah al ah al] @ [bh; bh; bl; bl] =
//     a @ b, each of the four partial products exact in fp32, summed in fp32 (split_f16 says why
//     it is exact): AMX's bf16 rate for fp16 GEMMs, measured slower than the fp16 kernel so far.
// Temporaries live in per-thread buffers charged to MemCategory::workspace and reused across
// calls (buffers over 64 MiB are freed after each call).
//
// Builds against oneDNN 3.x (the default: the PyPI wheel scripts/setup.sh installs) and 2.x
// (Debian 12's 2.6.3, -DMIXTRAIN_SYSTEM_ONEDNN=ON). The two differ here only in how a primitive
// descriptor is made (2.x: from an op descriptor) and how alpha is given (2.x: an output scale
// set when the primitive is made; 3.x: a weights scale passed at execution, which 3.x applies to
// the accumulator before the bias and the post-ops, as 2.x applied its output scale).
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "mixtrain/core/cpu_features.h"
#include "mixtrain/kernels/gemm_info.h"
#include "mixtrain/kernels/matmul_precision.h"
#include "mixtrain/kernels/quantize.h"

namespace mixtrain {
namespace {

using ddt = dnnl::memory::data_type;

dnnl::engine& cpu_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}
// CPU streams are cheap but not meant to be shared between threads.
dnnl::stream& cpu_stream() {
  thread_local dnnl::stream s(cpu_engine());
  return s;
}

ddt to_dnnl(DType t) {
  switch (t) {
    case DType::f32:
      return ddt::f32;
    case DType::bf16:
      return ddt::bf16;
    case DType::f16:
      return ddt::f16;
    case DType::i8:
      return ddt::s8;
    case DType::i32:
      return ddt::s32;
    default:
      throw DTypeError("gemm (oneDNN): unsupported dtype " + std::string(dtype_name(t)));
  }
}

// ---- one matrix operand as oneDNN sees it ---------------------------------------------------
// b matrices (r, c) with element strides (sb, sr, sc); b == 1 for an operand shared by all batches.
struct Mat {
  void* ptr = nullptr;
  DType dtype = DType::f32;
  int64_t b = 1, r = 1, c = 1;
  int64_t sb = 1, sr = 1, sc = 1;

  // After normalize(): sc == 1 (row-major, leading dim sr) or sr == 1 (column-major, leading dim sc).
  bool row_major() const { return sc == 1; }

  Mat transposed() const {
    Mat m = *this;
    std::swap(m.r, m.c);
    std::swap(m.sr, m.sc);
    m.normalize();
    return m;
  }

  // The strides of extent-1 dims are meaningless; give them the values a dense layout would have
  // so oneDNN recognises plain row-/column-major matrices (and so equal layouts get equal keys).
  void normalize() {
    if (r <= 1 && c <= 1) {
      sr = sc = 1;
    } else if (c <= 1) {
      sc = 1;  // a column: row-major with leading dim sr
    } else if (r <= 1) {
      if (sc == 1)
        sr = c;  // a dense row
      else
        sr = 1;  // a strided row: column-major with leading dim sc
    }
    if (b <= 1) sb = (r - 1) * sr + (c - 1) * sc + 1;
  }

  size_t bytes() const {
    return static_cast<size_t>(((b - 1) * sb + (r - 1) * sr + (c - 1) * sc + 1)) * dtype_size(dtype);
  }

  dnnl::memory::desc desc(int nd) const {
    if (nd == 2) return dnnl::memory::desc({r, c}, to_dnnl(dtype), dnnl::memory::dims{sr, sc});
    return dnnl::memory::desc({b, r, c}, to_dnnl(dtype), dnnl::memory::dims{sb, sr, sc});
  }
};

// Tensor (.., R, C) -> Mat, with op() applied.
Mat mat_of(const Tensor& t, bool trans) {
  Mat m;
  m.ptr = t.raw_data();
  m.dtype = t.dtype();
  m.r = t.size(-2);
  m.c = t.size(-1);
  m.sr = t.stride(-2);
  m.sc = t.stride(-1);
  if (t.dim() == 3) {
    m.b = t.size(0);
    m.sb = t.stride(0);
  }
  if (trans) {
    std::swap(m.r, m.c);
    std::swap(m.sr, m.sc);
  }
  m.normalize();
  return m;
}

// A dense layout for m's elements in dtype t: the same orientation as m (so a converted transposed
// input stays a cheap transposed operand), or row-major when force_row_major.
Mat dense_like(const Mat& m, DType t, bool force_row_major) {
  Mat d = m;
  d.ptr = nullptr;
  d.dtype = t;
  if (force_row_major || m.row_major()) {
    d.sr = m.c;
    d.sc = 1;
  } else {
    d.sr = 1;
    d.sc = m.r;
  }
  d.sb = m.r * m.c;
  d.normalize();
  return d;
}

char* elem_ptr(const Mat& m, int64_t off) {
  return static_cast<char*>(m.ptr) + off * static_cast<int64_t>(dtype_size(m.dtype));
}

// Copies from's elements into to (same extents), converting dtypes (one side is f32). Runs along
// the unit-stride dim when both share it (bulk SIMD conversions), else element by element.
void copy_convert(const Mat& from, const Mat& to) {
  const bool rows = from.sc == 1 && to.sc == 1;
  const bool cols = from.sr == 1 && to.sr == 1;
  if (!rows && !cols) {  // orientations differ (a transposed output with a bias): rare, slow path
    for (int64_t bi = 0; bi < from.b; ++bi)
      for (int64_t i = 0; i < from.r; ++i)
        for (int64_t j = 0; j < from.c; ++j)
          store_from_f32(to.ptr, to.dtype, bi * to.sb + i * to.sr + j * to.sc,
                         load_as_f32(from.ptr, from.dtype, bi * from.sb + i * from.sr + j * from.sc));
    return;
  }
  // A line is one row (rows) or one column (cols); `ld` steps between lines.
  const int64_t len = rows ? from.c : from.r;
  const int64_t nlines = rows ? from.r : from.c;
  const int64_t from_ld = rows ? from.sr : from.sc, to_ld = rows ? to.sr : to.sc;
  const bool dense =
      from_ld == len && to_ld == len && (from.b == 1 || (from.sb == len * nlines && to.sb == len * nlines));
  if (dense) {  // one bulk conversion (parallel inside for large n)
    convert_any(from.ptr, from.dtype, to.ptr, to.dtype, static_cast<size_t>(from.b * nlines * len));
    return;
  }
  const int64_t total = from.b * nlines;
  auto line = [&](int64_t l) {
    const int64_t bi = l / nlines, i = l % nlines;
    convert_any(elem_ptr(from, bi * from.sb + i * from_ld), from.dtype, elem_ptr(to, bi * to.sb + i * to_ld),
                to.dtype, static_cast<size_t>(len));
  };
  if (len >= (1 << 15)) {  // long lines: each conversion is parallel by itself
    for (int64_t l = 0; l < total; ++l) line(l);
  } else {
#pragma omp parallel for schedule(static) if (total * len >= (1 << 16))
    for (int64_t l = 0; l < total; ++l) line(l);
  }
}

// ---- fp16 as two bf16 parts ----------------------------------------------------------------------
// x = hi + lo exactly for every finite fp16 x: hi = bf16(x) rounded to nearest even (8 significant
// bits), and the rest, a multiple of x's fp16 ulp no larger than half a bf16 ulp (2^2 fp16 ulps),
// has at most 3 significant bits, so it is a bf16 value too (cut from its fp32 bits exactly). fp16's
// range (2^-24 .. 65504) is far inside bf16's, so neither part is a bf16 subnormal (which AMX
// would flush), and every product of two parts (at most 16 significant bits) is exact in fp32:
// [ah al ah al] @ [bh; bh; bl; bl] sums the exact partial products of a @ b in fp32. An infinite or
// NaN x gets lo = 0 (hi carries it); a product with an infinity may then come out NaN where the
// fp16 kernel gives the infinity (inf * 0 among the partial products): non-finite either way.
void split_f16_line(const float* f, uint16_t* hi, uint16_t* lo, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = std::bit_cast<uint32_t>(f[i]);
    const uint32_t h = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;  // round to nearest even
    const float rest = f[i] - std::bit_cast<float>(h << 16);    // exact
    hi[i] = static_cast<uint16_t>(h);
    lo[i] =
        (h & 0x7F80u) == 0x7F80u ? uint16_t{0} : static_cast<uint16_t>(std::bit_cast<uint32_t>(rest) >> 16);
  }
}

// from: an f16 operand; to: its split_like layout. K runs along from's columns (src) or rows (wei);
// part j of K (j = 0..3) holds hi or lo: src [hi lo hi lo], wei [hi hi lo lo].
void split_f16(const Mat& from, const Mat& to, bool k_is_cols) {
  const int64_t K = k_is_cols ? from.c : from.r;
  const bool along_cols = from.sc == 1 || from.c == 1;  // a line: a row (else a column)
  if (!along_cols && from.sr != 1) {  // neither dim unit-stride (a strided view): element by element
    for (int64_t bi = 0; bi < from.b; ++bi)
      for (int64_t i = 0; i < from.r; ++i)
        for (int64_t j = 0; j < from.c; ++j) {
          const float v = load_as_f32(from.ptr, from.dtype, bi * from.sb + i * from.sr + j * from.sc);
          uint16_t h, l;
          split_f16_line(&v, &h, &l, 1);
          for (int part = 0; part < 4; ++part) {
            const bool is_hi = k_is_cols ? part % 2 == 0 : part < 2;
            const int64_t r = i + (k_is_cols ? 0 : part * K), c = j + (k_is_cols ? part * K : 0);
            static_cast<uint16_t*>(to.ptr)[bi * to.sb + r * to.sr + c * to.sc] = is_hi ? h : l;
          }
        }
    return;
  }
  const int64_t len = along_cols ? from.c : from.r, nlines = along_cols ? from.r : from.c;
  const int64_t from_step = along_cols ? from.sr : from.sc;  // between lines
  const int64_t to_step = along_cols ? to.sr : to.sc;        // between lines, in to
  const int64_t to_inner = along_cols ? to.sc : to.sr;       // along a line, in to
  const int64_t to_part = (k_is_cols ? to.sc : to.sr) * K;   // from one part of K to the next
  const int64_t total = from.b * nlines;
  uint16_t* out = static_cast<uint16_t*>(to.ptr);
#pragma omp parallel for schedule(static) if (total * len >= (1 << 15))
  for (int64_t l = 0; l < total; ++l) {
    const int64_t bi = l / nlines, i = l % nlines;
    thread_local std::vector<float> f;
    thread_local std::vector<uint16_t> parts;
    if (f.size() < static_cast<size_t>(len)) {
      f.resize(static_cast<size_t>(len));
      parts.resize(2 * static_cast<size_t>(len));
    }
    convert_any(elem_ptr(from, bi * from.sb + i * from_step), DType::f16, f.data(), DType::f32,
                static_cast<size_t>(len));
    uint16_t* hi = parts.data();
    uint16_t* lo = parts.data() + len;
    split_f16_line(f.data(), hi, lo, len);
    for (int part = 0; part < 4; ++part) {
      const uint16_t* v = (k_is_cols ? part % 2 == 0 : part < 2) ? hi : lo;
      uint16_t* d = out + bi * to.sb + i * to_step + part * to_part;
      if (to_inner == 1) {
        std::memcpy(d, v, static_cast<size_t>(len) * sizeof(uint16_t));
      } else {
        for (int64_t e = 0; e < len; ++e) d[e * to_inner] = v[e];
      }
    }
  }
}

// ---- per-thread temporaries ---------------------------------------------------------------------
class ScratchBuffer {
 public:
  explicit ScratchBuffer(Device d) : device_(d) {}
  void* get(size_t bytes) {
    if (!buf_.defined() || buf_.nbytes() < bytes) {
      buf_ = Tensor();  // free first: peak memory is the new size, not old + new
      buf_ = Tensor::empty({static_cast<int64_t>((bytes + 3) / 4 + 16)}, DType::f32, MemCategory::workspace,
                           device_);
    }
    return buf_.raw_data();
  }
  void trim(size_t keep_bytes) {
    if (buf_.defined() && buf_.nbytes() > keep_bytes) buf_ = Tensor();
  }

 private:
  Device device_;
  Tensor buf_;
};

struct ThreadScratch {
  explicit ThreadScratch(Device d) : pad(d), a(d), b(d), c(d) {}
  ScratchBuffer pad, a, b, c;  // oneDNN scratchpad, converted src, converted weights, f32 dst
  void trim(size_t keep = size_t{64} << 20) {
    for (ScratchBuffer* s : {&pad, &a, &b, &c}) s->trim(keep);
  }
};
// One set per thread and device: the meta device's buffers (meta tensors) are kept apart from
// the CPU's, as a second device's would be.
ThreadScratch& thread_scratch(Device d) {
  thread_local ThreadScratch cpu(Device::cpu()), meta(Device::meta());
  return d.is_meta() ? meta : cpu;
}
struct TrimScratchOnExit {
  ThreadScratch& s;
  ~TrimScratchOnExit() { s.trim(); }
};

// ---- the problem in oneDNN's terms, and the primitive cache ---------------------------------------
// dst (B, M, N) = alpha * src (B|1, M, K) @ wei (B|1, K, N) + beta * dst + bias (N).
struct Problem {
  int nd = 2;  // 2-D descriptors unless there is a batch
  Mat src, wei, dst;
  const float* bias = nullptr;
  int64_t bias_stride = 1;
  float alpha = 1.f, beta = 0.f;
  // fp32 inputs under float32_matmul_precision() medium: oneDNN may use bf16 products
  // (kernels/matmul_precision.h). Set from the caller's dtypes, so never for converted 16-bit inputs.
  bool fpmath_bf16 = false;
  // The int8 GEMM with its dequantizing epilogue (gemm_s8_dequantized): dst = (acc * col_scale[n])
  // * row_scale[m] + bias[n], oneDNN's per-column weights scales and two binary post-ops.
  bool dequant = false;
  bool gelu_erf = false;             // dequant only: then oneDNN's gelu_erf, before the rounding to dst
  const float* row_scale = nullptr;  // (M), dequant only
  const float* col_scale = nullptr;  // (N), dequant only
  // The weights in the layout the primitive prefers (format_tag::any), reordered once per weight
  // (packed_weight below): only for weights that stay as they are between calls (a quantized
  // model's), whose storage version says when they change.
  bool packed_wei = false;
};

enum class BiasMode : int64_t { none, input, post_op };

BiasMode bias_mode(const Problem& p) {
  if (!p.bias) return BiasMode::none;
  // oneDNN computes alpha * (acc + bias) for the bias input; ours is alpha * acc + bias. The
  // dequantizing epilogue's row scale multiplies after oneDNN's bias input: its bias is a post-op.
  return p.alpha == 1.f && !p.dequant ? BiasMode::input : BiasMode::post_op;
}

dnnl::memory::desc bias_desc(const Problem& p) {
  const int64_t N = p.dst.c, s = p.bias_stride;
  if (p.nd == 2) return dnnl::memory::desc({1, N}, ddt::f32, dnnl::memory::dims{N * s, s});
  return dnnl::memory::desc({1, 1, N}, ddt::f32, dnnl::memory::dims{N * s, N * s, s});
}

struct Key {
  std::array<int64_t, 32> v{};
  friend bool operator==(const Key& x, const Key& y) { return x.v == y.v; }
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
    for (int64_t x : k.v) {
      h ^= static_cast<uint64_t>(x);
      h *= 1099511628211ull;
    }
    return static_cast<size_t>(h);
  }
};

Key make_key(const Problem& p) {
  Key k;
  size_t i = 0;
  auto put = [&](int64_t x) { k.v[i++] = x; };
  put(p.nd);
  for (const Mat* m : {&p.src, &p.wei, &p.dst}) {
    put(static_cast<int64_t>(m->dtype));
    for (int64_t x : {m->b, m->r, m->c, m->sb, m->sr, m->sc}) put(x);
  }
  put(static_cast<int64_t>(bias_mode(p)));
  put(p.bias ? p.bias_stride : 0);
  // 3.x takes alpha at execution (a runtime weights scale): one primitive serves every alpha != 1
  // (the fp8 GEMMs' scale products change every call); 2.x bakes it in.
  put(DNNL_VERSION_MAJOR >= 3 ? int64_t{p.alpha != 1.f} : int64_t{std::bit_cast<int32_t>(p.alpha)});
  put(std::bit_cast<int32_t>(p.beta));
  put(p.fpmath_bf16);
  put(p.dequant);
  put(p.gelu_erf);
  put(p.packed_wei);
  put(omp_get_max_threads());  // oneDNN fixes its thread partition when the primitive is made
  return k;
}

constexpr bool kOnednn3 = DNNL_VERSION_MAJOR >= 3;

struct Entry {
  bool ok = false;   // false: oneDNN has no implementation (remembered, so not retried)
  std::string impl;  // impl_info_str(), e.g. "brg:avx512_core_bf16"
  dnnl::matmul prim;
  dnnl::memory::desc src_md, wei_md, dst_md, bias_md, scratch_md;
  int bias_arg = 0;                 // DNNL_ARG_BIAS, the binary post-op's argument, or 0
  bool dequant = false;             // Problem::dequant: per-column weights scales, a row-scale post-op
  int row_scale_arg = 0;            // the row-scale binary post-op's argument (dequant)
  dnnl::memory::desc row_scale_md;  // (1, M, 1) f32
  float alpha = 1.f;                // oneDNN 3.x: the weights scale passed at execution (when != 1)
  // Problem::packed_wei: wei_md is the primitive's own layout; plain_wei_md the caller's, and
  // `pack` the reorder from it (packed false: the primitive took the plain layout as it is).
  bool packed = false;
  dnnl::memory::desc plain_wei_md;
  dnnl::reorder pack;
  bool runtime_alpha() const { return kOnednn3 && alpha != 1.f; }
};

Entry make_entry(const Problem& p) {
  Entry e;
  e.src_md = p.src.desc(p.nd);
  e.wei_md = p.wei.desc(p.nd);
  e.dst_md = p.dst.desc(p.nd);
  if (p.packed_wei) {
    e.plain_wei_md = e.wei_md;
    const dnnl::memory::dims d = e.wei_md.get_dims();
    e.wei_md = dnnl::memory::desc(d, to_dnnl(p.wei.dtype), dnnl::memory::format_tag::any);
  }
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // our per-thread buffer: thread-safe
  if (p.fpmath_bf16) attr.set_fpmath_mode(dnnl::fpmath_mode::bf16);
  e.alpha = p.alpha;
#if DNNL_VERSION_MAJOR >= 3
  if (p.alpha != 1.f) attr.set_scales_mask(DNNL_ARG_WEIGHTS, 0);  // one scale, given at execution
#else
  if (p.alpha != 1.f) attr.set_output_scales(0, {p.alpha});
#endif
  dnnl::post_ops ops;
  int n_ops = 0;
  if (p.beta != 0.f) {
    ops.append_sum(p.beta);
    ++n_ops;
  }
#if DNNL_VERSION_MAJOR >= 3
  if (p.dequant) {  // (acc * col_scale[n]) * row_scale[m], then the bias below
    e.dequant = true;
    // A per-row binary operand (M, 1) of a 2-D problem gets oneDNN 3.2's reference kernel; framed
    // as (1, M, N) with (1, M, 1) it runs on the brgemm kernels (AMX, VNNI): dequant problems are 3-D.
    attr.set_scales_mask(DNNL_ARG_WEIGHTS, 1 << 2);  // one scale per column of wei (1, K, N)
    e.row_scale_md = dnnl::memory::desc({1, p.dst.r, 1}, ddt::f32, dnnl::memory::dims{p.dst.r, 1, 1});
    ops.append_binary(dnnl::algorithm::binary_mul, e.row_scale_md);
    e.row_scale_arg = DNNL_ARG_ATTR_MULTIPLE_POST_OP(n_ops) | DNNL_ARG_SRC_1;
    ++n_ops;
  }
#endif
  const BiasMode bm = bias_mode(p);
  if (bm != BiasMode::none) e.bias_md = bias_desc(p);
  if (bm == BiasMode::post_op) {
    ops.append_binary(dnnl::algorithm::binary_add, e.bias_md);
    e.bias_arg = DNNL_ARG_ATTR_MULTIPLE_POST_OP(n_ops) | DNNL_ARG_SRC_1;
  } else if (bm == BiasMode::input) {
    e.bias_arg = DNNL_ARG_BIAS;
  }
  if (p.gelu_erf) ops.append_eltwise(dnnl::algorithm::eltwise_gelu_erf, 0.f, 0.f);
  attr.set_post_ops(ops);
  try {
    const dnnl::memory::desc no_bias;
    const dnnl::memory::desc& bias_in = bm == BiasMode::input ? e.bias_md : no_bias;
#if DNNL_VERSION_MAJOR >= 3
    dnnl::matmul::primitive_desc pd(cpu_engine(), e.src_md, e.wei_md, bias_in, e.dst_md, attr);
#else
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(e.src_md, e.wei_md, bias_in, e.dst_md), attr,
                                    cpu_engine());
#endif
    e.impl = pd.impl_info_str();
    e.scratch_md = pd.scratchpad_desc();
    if (p.packed_wei) {
      e.wei_md = pd.weights_desc();
      e.packed = e.wei_md != e.plain_wei_md;
      if (e.packed)
        e.pack = dnnl::reorder(
            dnnl::reorder::primitive_desc(cpu_engine(), e.plain_wei_md, cpu_engine(), e.wei_md));
    }
    e.prim = dnnl::matmul(pd);
    e.ok = true;
  } catch (const dnnl::error&) {
    e.ok = false;  // unimplemented for this combination: the caller rewrites the problem
  }
  return e;
}

class PrimitiveCache {
 public:
  static PrimitiveCache& instance() {
    static PrimitiveCache c;
    return c;
  }
  // The entry for p, made (under the lock, so never twice) on a miss.
  std::shared_ptr<const Entry> get(const Problem& p) {
    const Key k = make_key(p);
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = map_.find(k); it != map_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++hits_;
      return it->second->second;
    }
    ++misses_;
    auto e = std::make_shared<const Entry>(make_entry(p));
    lru_.emplace_front(k, e);
    map_[k] = lru_.begin();
    if (lru_.size() > capacity_) {  // in-flight users keep their shared_ptr
      map_.erase(lru_.back().first);
      lru_.pop_back();
    }
    return e;
  }
  GemmCacheStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return {hits_, misses_, static_cast<int64_t>(lru_.size()), static_cast<int64_t>(capacity_)};
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    map_.clear();
    lru_.clear();
    hits_ = misses_ = 0;
  }

 private:
  using Item = std::pair<Key, std::shared_ptr<const Entry>>;
  std::mutex mu_;
  std::list<Item> lru_;
  std::unordered_map<Key, std::list<Item>::iterator, KeyHash> map_;
  size_t capacity_ = 1024;
  int64_t hits_ = 0, misses_ = 0;
};

// ---- weights in the primitive's own layout (Problem::packed_wei) ------------------------------------
// oneDNN's brgemm kernels copy plain weights into their blocked layout inside every call (AMX wants
// K in groups of 4 int8 or 2 bf16 per 32-bit word, N in 16s or 64s). A weight that stays as it is
// from call to call (a quantized model's codes: MemCategory::quantized_weights) is reordered once
// instead, and the copy kept with the weight's storage (Storage::derived: released with it), per
// weight and layout, while the storage keeps its version (ParameterStore::mark_written bumps it
// after a load or a quantization: the copy is then made again). The copies are tensors of
// MemCategory::cast_cache, so the memory tracker counts them; on the meta device they are
// allocated alike and nothing is reordered.
struct PackedWeight {
  const void* data;  // the weight's first element within the storage
  dnnl::memory::desc md;
  uint64_t version;
  Tensor packed;
};
using PackedWeights = std::vector<PackedWeight>;  // what a storage's derived() holds
std::mutex g_packed_mutex;

void reorder_weight(const Tensor& w, const Entry& e, Tensor& packed) {
  dnnl::engine& eng = cpu_engine();
  dnnl::memory from(e.plain_wei_md, eng, const_cast<void*>(w.raw_data())),
      to(e.wei_md, eng, packed.raw_data());
  dnnl::stream& s = cpu_stream();
  e.pack.execute(s, from, to);
  s.wait();
}

// The copy of w (plain layout e.plain_wei_md at w.raw_data()) in e's layout, made on a miss.
Tensor packed_weight(const Tensor& w, const Entry& e, bool compute) {
  std::lock_guard<std::mutex> lock(g_packed_mutex);
  Storage& st = *w.storage();
  if (!st.derived()) st.derived() = std::make_shared<PackedWeights>();
  PackedWeights& set = *static_cast<PackedWeights*>(st.derived().get());
  for (PackedWeight& p : set)
    if (p.data == w.raw_data() && p.md == e.wei_md) {
      if (p.version != st.version()) {
        if (compute) reorder_weight(w, e, p.packed);
        p.version = st.version();
      }
      return p.packed;
    }
  Tensor packed = Tensor::empty({static_cast<int64_t>(e.wei_md.get_size())}, DType::i8,
                                MemCategory::cast_cache, w.device());
  if (compute) reorder_weight(w, e, packed);
  set.push_back({w.raw_data(), e.wei_md, st.version(), packed});
  return packed;
}

// ---- choosing how to run a problem ------------------------------------------------------------
// Tried in order; the first oneDNN accepts with a non-reference implementation wins (the last one
// is taken whatever its implementation).
struct Variant {
  bool convert_inputs = false;  // src/wei converted to dense f32
  bool f32_dst = false;         // computed into a dense row-major f32 temporary
  bool split_f16 = false;       // f16 src/wei split into bf16 parts along K (split_like, split_f16)
};

bool fp16_arithmetic() { return cpu_features().avx512_fp16; }

// fp16 GEMMs: oneDNN's fp16 matmul where the CPU has AVX512-FP16 (it widens to fp32 inside for
// its fp32 accumulation and runs at the fp32 rate: 318-358 GF/s against fp32's 317-355 at the
// model's shapes on a Xeon with AMX, oneDNN 3.2), else the fp32 kernel (exact conversion). The
// split into bf16 parts (bf16x4) is there on request: AMX runs the 4K-long bf16 GEMM at 1,350-2,000
// GF/s (336-502 fp16 GF/s), but splitting both operands each call costs more than that gains:
// gpt-mini 16-mixed spent 1,170 ms a step in GEMMs that way against 772 native (bench/RESULTS.md).
// It would pay with the split fused into the GEMM's own packing, or the weights' split kept per
// optimizer step.
using cpu::F16GemmRoute;
std::atomic<F16GemmRoute> g_f16_route{F16GemmRoute::automatic};

F16GemmRoute f16_route() {
  const F16GemmRoute forced = g_f16_route.load(std::memory_order_relaxed);
  if (forced != F16GemmRoute::automatic) return forced;
  static const F16GemmRoute chosen = [] {
    const char* v = std::getenv("MIXTRAIN_F16_GEMM");
    if (v && std::strcmp(v, "native") == 0) return F16GemmRoute::native;
    if (v && std::strcmp(v, "fp32") == 0) return F16GemmRoute::via_f32;
    if (v && std::strcmp(v, "bf16x4") == 0) return F16GemmRoute::bf16x4;
    return fp16_arithmetic() ? F16GemmRoute::native : F16GemmRoute::via_f32;
  }();
  return chosen;
}

// bf16 GEMMs through the fp32 kernel on Intel CPUs with AVX512-BF16 but no AMX: there
// VDPBF16PS issues on one port against FMA's two, and oneDNN's bf16 brgemm runs at about half
// its fp32 rate (Xeon model 207: 155-170 GF/s against 250-320 at the model's shapes, plain or
// blocked weights, oneDNN 2.6 and 3.2 alike; bench/RESULTS.md). On AMD Zen 4 (bf16 about 2x
// fp32) and with AMX the bf16 kernel is the fast one. MIXTRAIN_BF16_GEMM=native|fp32 overrides
// the rule (read once); gemm_impl_name says which route a build takes.
using cpu::Bf16GemmRoute;
std::atomic<Bf16GemmRoute> g_bf16_route{Bf16GemmRoute::automatic};

bool bf16_via_f32() {
  switch (g_bf16_route.load(std::memory_order_relaxed)) {
    case Bf16GemmRoute::native:
      return false;
    case Bf16GemmRoute::via_f32:
      return true;
    case Bf16GemmRoute::automatic:
      break;
  }
  static const bool via = [] {
    const char* v = std::getenv("MIXTRAIN_BF16_GEMM");
    if (v && std::strcmp(v, "native") == 0) return false;
    if (v && std::strcmp(v, "fp32") == 0) return true;
    const CpuFeatures& f = cpu_features();
    return f.intel && f.avx512_bf16 && !f.amx_bf16;
  }();
  return via;
}

struct Plan {
  std::shared_ptr<const Entry> entry;  // null: nothing works, use the reference
  Variant variant;
  Problem run;  // the problem as executed (converted operands' layouts, temp dst layout)
};

// The bf16 layout of an f16 operand split along K (split_f16): src (M, K) -> (M, 4K), wei (K, N) ->
// (4K, N), each dense in the operand's own orientation (a transposed operand stays transposed).
Mat split_like(const Mat& m, bool k_is_cols) {
  Mat wide = m;  // m's orientation, K four times as long
  if (k_is_cols)
    wide.c = 4 * m.c;
  else
    wide.r = 4 * m.r;
  return dense_like(wide, DType::bf16, false);
}

Problem apply_variant(const Problem& p, Variant v) {
  Problem q = p;
  if (v.split_f16) {
    q.src = split_like(p.src, true);
    q.wei = split_like(p.wei, false);
  }
  if (v.convert_inputs) {
    q.src = dense_like(p.src, DType::f32, false);
    q.wei = dense_like(p.wei, DType::f32, false);
  }
  if (v.f32_dst) q.dst = dense_like(p.dst, DType::f32, true);
  return q;
}

Plan choose(const Problem& p) {
  std::array<Variant, 6> tries;
  size_t n = 0;
  const F16GemmRoute f16 = p.src.dtype == DType::f16 ? f16_route() : F16GemmRoute::native;
  const bool must_convert = f16 == F16GemmRoute::via_f32 || (p.src.dtype == DType::bf16 && bf16_via_f32());
  const bool temp_dst = p.dst.dtype != DType::f32 || !p.dst.row_major();
  if (f16 == F16GemmRoute::bf16x4) {
    tries[n++] = {false, false, true};
    if (temp_dst) tries[n++] = {false, true, true};
  } else if (!must_convert) {
    tries[n++] = {false, false};
    if (temp_dst) tries[n++] = {false, true};
  }
  tries[n++] = {true, false};
  tries[n++] = {true, true};
  for (size_t i = 0; i < n; ++i) {
    Plan plan;
    plan.variant = tries[i];
    plan.run = apply_variant(p, tries[i]);
    plan.entry = PrimitiveCache::instance().get(plan.run);
    const bool last = i + 1 == n;
    if (plan.entry->ok && (last || plan.entry->impl.rfind("ref", 0) != 0)) return plan;
  }
  return Plan{};
}

// The dnnl::memory objects of one primitive's arguments, made once per thread and re-pointed at
// each call's buffers (making them costs more than a small GEMM's arithmetic).
struct BoundArgs {
  std::shared_ptr<const Entry> entry;  // keeps the descriptors (and the map key) alive
  std::unordered_map<int, dnnl::memory> args;
  void set(int arg, void* ptr) { args.at(arg).set_data_handle(ptr); }
};

#if DNNL_VERSION_MAJOR >= 3
constexpr int kScaleArg = DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS;
#else
constexpr int kScaleArg = 0;  // unused: 2.x takes alpha when the primitive is made
#endif

BoundArgs& bound_args(const std::shared_ptr<const Entry>& e) {
  thread_local std::unordered_map<const Entry*, BoundArgs> per_thread;
  if (auto it = per_thread.find(e.get()); it != per_thread.end()) return it->second;
  if (per_thread.size() >= 256) per_thread.clear();  // bound the entries kept alive past eviction
  BoundArgs& b = per_thread[e.get()];
  b.entry = e;
  dnnl::engine& eng = cpu_engine();
  auto add = [&](int arg, const dnnl::memory::desc& md) {
    b.args.emplace(arg, dnnl::memory(md, eng, DNNL_MEMORY_NONE));
  };
  add(DNNL_ARG_SRC, e->src_md);
  add(DNNL_ARG_WEIGHTS, e->wei_md);
  add(DNNL_ARG_DST, e->dst_md);
  if (e->bias_arg) add(e->bias_arg, e->bias_md);
  if (e->scratch_md.get_size() > 0) add(DNNL_ARG_SCRATCHPAD, e->scratch_md);
  if (e->runtime_alpha())  // one f32, the call's alpha (execute points it at its own)
    b.args.emplace(kScaleArg, dnnl::memory(dnnl::memory::desc({1}, ddt::f32, dnnl::memory::dims{1}), eng,
                                           const_cast<float*>(&e->alpha)));
  if (e->dequant) {  // the column scales (N) and the row scales (M, 1), pointed at by execute
    const int64_t N = e->dst_md.get_dims().back();
    add(kScaleArg, dnnl::memory::desc({N}, ddt::f32, dnnl::memory::dims{1}));
    add(e->row_scale_arg, e->row_scale_md);
  }
  return b;
}

// compute false: only takes the scratch buffers a call takes, in the same order (the meta device).
void execute(const Plan& plan, const Problem& p, ThreadScratch& tls, bool compute) {
  const Entry& e = *plan.entry;
  TrimScratchOnExit trim{tls};
  Mat src = plan.run.src, wei = plan.run.wei, dst = plan.run.dst;
  if (plan.variant.split_f16) {
    src.ptr = tls.a.get(src.bytes());
    if (compute) split_f16(p.src, src, true);
    wei.ptr = tls.b.get(wei.bytes());
    if (compute) split_f16(p.wei, wei, false);
  }
  if (plan.variant.convert_inputs) {
    src.ptr = tls.a.get(src.bytes());
    if (compute) copy_convert(p.src, src);
    wei.ptr = tls.b.get(wei.bytes());
    if (compute) copy_convert(p.wei, wei);
  }
  if (plan.variant.f32_dst) {
    dst.ptr = tls.c.get(dst.bytes());
    if (compute && p.beta != 0.f) copy_convert(p.dst, dst);  // the sum post-op reads it
  }
  if (!compute) {
    if (const size_t sp = e.scratch_md.get_size(); sp > 0) tls.pad.get(sp);
    return;
  }
  BoundArgs& bound = bound_args(plan.entry);
  bound.set(DNNL_ARG_SRC, src.ptr);
  bound.set(DNNL_ARG_WEIGHTS, wei.ptr);
  bound.set(DNNL_ARG_DST, dst.ptr);
  if (e.bias_arg) bound.set(e.bias_arg, const_cast<float*>(p.bias));
  thread_local float alpha;  // alive until the primitive has run (s.wait() below)
  if (e.runtime_alpha()) {
    alpha = p.alpha;
    bound.set(kScaleArg, &alpha);
  }
  if (e.dequant) {
    bound.set(kScaleArg, const_cast<float*>(p.col_scale));
    bound.set(e.row_scale_arg, const_cast<float*>(p.row_scale));
  }
  if (const size_t sp = e.scratch_md.get_size(); sp > 0) bound.set(DNNL_ARG_SCRATCHPAD, tls.pad.get(sp));
  dnnl::stream& s = cpu_stream();
  e.prim.execute(s, bound.args);
  s.wait();
  if (plan.variant.f32_dst) copy_convert(dst, p.dst);  // the one rounding to c's dtype
}

// The oneDNN frame for gemm's arguments (already checked by the public gemm).
Problem make_problem(const Tensor& a, const Tensor& b, Tensor& c, const GemmOptions& opt,
                     const Tensor* bias) {
  Problem p;
  const Mat A = mat_of(a, opt.trans_a), B = mat_of(b, opt.trans_b), C = mat_of(c, false);
  p.nd = (c.dim() == 3 && c.size(0) > 1) ? 3 : 2;
  // A column-major output (a transposed view) would get oneDNN's reference kernel; compute its
  // transpose instead: c^T = op(b)^T @ op(a)^T, which is row-major. (Not with a bias, which would
  // then run along rows, again a reference-kernel case: that goes through an f32 temporary.)
  if (!bias && !C.row_major()) {
    p.src = B.transposed();
    p.wei = A.transposed();
    p.dst = C.transposed();
  } else {
    p.src = A;
    p.wei = B;
    p.dst = C;
  }
  if (bias) {
    p.bias = bias->data<float>();
    p.bias_stride = bias->size(0) > 1 ? bias->stride(0) : 1;
  }
  p.alpha = opt.alpha;
  p.beta = opt.beta;
  p.fpmath_bf16 = a.dtype() == DType::f32 && b.dtype() == DType::f32 &&
                  float32_matmul_precision() == MatmulPrecision::medium;
  return p;
}

std::string describe_plan(const Plan& plan, DType in) {
  if (!plan.entry) return "reference (no oneDNN implementation)";
  std::string s = plan.entry->impl;
  if (plan.variant.split_f16)
    s += " (fp16 split into bf16 hi + lo: four exact bf16 products per fp16 product, fp32 accumulation)";
  else if (plan.variant.convert_inputs && in == DType::f16 && f16_route() == F16GemmRoute::via_f32 &&
           fp16_arithmetic())
    s += " (fp16 converted to fp32: the fp32 route chosen, MIXTRAIN_F16_GEMM=fp32)";
  else if (plan.variant.convert_inputs && in == DType::f16)
    s += fp16_arithmetic() ? " (fp16 converted to fp32: oneDNN has no fp16 matmul here)"
                           : " (fp16 converted to fp32: no fp16 arithmetic on this CPU)";
  else if (plan.variant.convert_inputs && in == DType::bf16 && bf16_via_f32())
    s += " (bf16 converted to fp32: the fp32 kernel is the faster one on this CPU)";
  else if (plan.variant.convert_inputs)
    s += " (inputs converted to fp32)";
  if (plan.variant.f32_dst) s += " (fp32 output rounded afterwards)";
  return s;
}

}  // namespace

namespace {
// compute false: the meta device's GEMM (gemm_workspace_only).
void gemm_impl(const Tensor& a, const Tensor& b, Tensor& c, const GemmOptions& opt, const Tensor* bias,
               bool compute) {
  const int64_t K = opt.trans_a ? a.size(-2) : a.size(-1);
  // f64 is for gradient checks (no oneDNN f64 matmul); oneDNN rejects or crashes on zero sizes.
  if (force_reference() || a.dtype() == DType::f64 || c.numel() == 0 || K == 0) {
    if (compute) ref::gemm(a, b, c, opt, bias);
    return;
  }
  const Problem p = make_problem(a, b, c, opt, bias);
  const Plan plan = choose(p);
  if (!plan.entry) {
    if (compute) ref::gemm(a, b, c, opt, bias);
    return;
  }
  execute(plan, p, thread_scratch(c.device()), compute);
}
}  // namespace

void cpu::gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmOptions& opt, const Tensor* bias) {
  gemm_impl(a, b, c, opt, bias, true);
}

void cpu::set_bf16_gemm_route(Bf16GemmRoute r) { g_bf16_route.store(r, std::memory_order_relaxed); }
void cpu::set_f16_gemm_route(F16GemmRoute r) { g_f16_route.store(r, std::memory_order_relaxed); }

void gemm_workspace_only(const Tensor& a, const Tensor& b, Tensor& c, const GemmOptions& opt,
                         const Tensor* bias) {
  gemm_impl(a, b, c, opt, bias, false);
}

namespace {
// The Mat make_problem() would build (mat_of) from a contiguous (r, c) tensor.
Mat dense_mat(DType t, int64_t r, int64_t c) {
  Mat x;
  x.dtype = t;
  x.b = 1;
  x.r = r;
  x.c = c;
  x.sr = c;
  x.sc = 1;
  x.sb = r * c;
  x.normalize();
  return x;
}

// The plan for a contiguous (m, k) @ (k, n) problem, as make_problem() would frame it.
Plan plan_for(DType in_dtype, DType out_dtype, int64_t m, int64_t n, int64_t k, MatmulPrecision precision) {
  Problem p;
  p.src = dense_mat(in_dtype, m, k);
  p.wei = dense_mat(in_dtype, k, n);
  p.dst = dense_mat(out_dtype, m, n);
  p.fpmath_bf16 = in_dtype == DType::f32 && precision == MatmulPrecision::medium;
  return choose(p);
}

// oneDNN runs bf16 products for an fp32 problem when its implementation is a bf16 one.
bool impl_uses_bf16(const Plan& plan) {
  return plan.entry && (plan.entry->impl.find("bf16") != std::string::npos ||
                        plan.entry->impl.find("amx") != std::string::npos);
}

constexpr int64_t kTypical = 256;

}  // namespace

std::string gemm_impl_for(DType in_dtype, DType out_dtype, int64_t m, int64_t n, int64_t k) {
  if (force_reference()) return "reference (MIXTRAIN_FORCE_REFERENCE)";
  if (in_dtype == DType::f64) return "reference (f64)";
  return describe_plan(plan_for(in_dtype, out_dtype, m, n, k, float32_matmul_precision()), in_dtype);
}

bool matmul_precision_uses_bf16(MatmulPrecision precision) {
  if (force_reference() || precision != MatmulPrecision::medium) return false;
  return impl_uses_bf16(plan_for(DType::f32, DType::f32, kTypical, kTypical, kTypical, precision));
}

std::string matmul_precision_route(MatmulPrecision precision) {
  if (force_reference()) return "fp32 (reference: MIXTRAIN_FORCE_REFERENCE)";
  const Plan plan = plan_for(DType::f32, DType::f32, kTypical, kTypical, kTypical, precision);
  const std::string impl = describe_plan(plan, DType::f32);
  switch (precision) {
    case MatmulPrecision::highest:
      return "fp32 (" + impl + ")";
    case MatmulPrecision::high:
      return "fp32 (" + impl + "): oneDNN has no TF32 or bf16x3 fp32 matmul on CPUs, so high runs as highest";
    case MatmulPrecision::medium:
      if (impl_uses_bf16(plan))
        return "bf16 products, fp32 accumulation (oneDNN fpmath mode bf16: " + impl + ")";
      return "fp32 (" + impl + "): oneDNN " + onednn_version() +
             " keeps the fp32 kernel for fpmath mode bf16 on this CPU (it uses bf16 units for it on AMX, "
             "with oneDNN 3.x), so medium runs as highest";
  }
  return impl;
}

void gemm_scratch_release() {
  thread_scratch(Device::cpu()).trim(0);
  thread_scratch(Device::meta()).trim(0);
}

bool gemm_splits_f16_into_bf16() {
  return !force_reference() &&
         plan_for(DType::f16, DType::f32, kTypical, kTypical, kTypical, MatmulPrecision::highest)
             .variant.split_f16;
}

bool gemm_converts_to_f32(DType in_dtype) {
  return plan_for(in_dtype, DType::f32, kTypical, kTypical, kTypical, MatmulPrecision::highest)
      .variant.convert_inputs;
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

// ---- the exact int8 GEMM (kernels/quantize.h: gemm_s8) ------------------------------------------
namespace {
using cpu::S8GemmRoute;
std::atomic<S8GemmRoute> g_s8_route{S8GemmRoute::automatic};

// A oneDNN primitive that exists and is not its reference kernel (the s8 routes take only those).
bool fast_entry(const Entry& e) { return e.ok && e.impl.rfind("ref", 0) != 0; }

// Dot-product units that add four u8*s8 products straight into an int32 lane (VPDPBUSD; AMX's
// TDPBSSD): oneDNN's int8 kernels are exact there. Without them (AVX2, AVX-512 before VNNI) they
// add pairs of products in saturating 16-bit lanes (VPMADDUBSW): measured on AMD EPYC (Zen 3,
// AVX2): 24,559 of 24,576 results wrong for random full-range int8 at (64, 384) x (384, 384).
bool s8_via_f32() {
  switch (g_s8_route.load(std::memory_order_relaxed)) {
    case S8GemmRoute::onednn:
      return false;
    case S8GemmRoute::via_f32:
      return true;
    case S8GemmRoute::automatic:
      break;
  }
  static const bool via = [] {
    const char* v = std::getenv("MIXTRAIN_S8_GEMM");
    if (v && std::strcmp(v, "onednn") == 0) return false;
    if (v && std::strcmp(v, "fp32") == 0) return true;
    const CpuFeatures& f = cpu_features();
    return !(f.avx512_vnni || f.avx_vnni || f.amx_int8);
  }();
  return via;
}

// K blocks of the fp32 route: |a * b| <= 2^14 for int8 operands, so a block's partial sums are
// integers of magnitude <= 2^24, all exact in fp32 whatever the order of summation.
constexpr int64_t kS8Block = 1024;

// An int8 matrix (r, c) row-major -> fp32, exactly.
void widen_s8(const Tensor& q, Tensor& f) {
  const int64_t n = q.numel();
  const int8_t* s = static_cast<const int8_t*>(q.raw_data());
  float* d = f.data<float>();
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(s[i]);
}

// compute false: the meta device's (only the tracked temporaries the CPU call takes).
void gemm_s8_impl(const Tensor& a, const Tensor& b, Tensor& acc, bool compute) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(0);
  if (force_reference() || M == 0 || N == 0 || K == 0) {
    if (compute) ref::gemm_s8(a, b, acc);
    return;
  }
  if (!s8_via_f32()) {
    Plan plan;
    plan.run.src = mat_of(a, false);
    plan.run.wei = mat_of(b, true);
    plan.run.dst = mat_of(acc, false);
    plan.entry = PrimitiveCache::instance().get(plan.run);
    if (fast_entry(*plan.entry)) {
      execute(plan, plan.run, thread_scratch(acc.device()), compute);
      return;
    }
  }
  const Device dev = acc.device();
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  Tensor a32 = Tensor::empty({M, K}, DType::f32, MemCategory::workspace, dev);
  Tensor b32 = Tensor::empty({N, K}, DType::f32, MemCategory::workspace, dev);
  Tensor c32 = Tensor::empty({M, N}, DType::f32, MemCategory::workspace, dev);
  if (compute) {
    widen_s8(ac, a32);
    widen_s8(bc, b32);
  }
  GemmOptions o;
  o.trans_b = true;
  const int64_t as0 = acc.stride(0), as1 = acc.stride(1);
  int32_t* out = static_cast<int32_t*>(acc.raw_data());
  for (int64_t k0 = 0; k0 < K; k0 += kS8Block) {
    const int64_t k1 = std::min(K, k0 + kS8Block);
    gemm_impl(a32.slice(1, k0, k1), b32.slice(1, k0, k1), c32, o, nullptr, compute);
    if (!compute) continue;
    const float* c = c32.data<float>();
    const bool first = k0 == 0;
#pragma omp parallel for schedule(static) if (M * N >= (1 << 16))
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        const int32_t v = static_cast<int32_t>(c[m * N + n]);  // an exact integer
        int32_t& dst = out[m * as0 + n * as1];
        dst = first ? v : dst + v;
      }
  }
}

// Whether oneDNN may run the epilogue inside its s8 matmul here: 3.x, the s8 route, an f32 or bf16 out.
bool epilogue_may_fuse(DType out_dtype) {
  return !force_reference() && kOnednn3 && !s8_via_f32() &&
         (out_dtype == DType::f32 || out_dtype == DType::bf16);
}

// dst = epilogue(src @ wei) as one oneDNN problem, framed (1, M, N): oneDNN 3.2's fast kernels take
// the per-row operand only so (make_entry).
Problem dequant_problem(const Mat& src, const Mat& wei, const Mat& dst, bool gelu_erf) {
  Problem p;
  p.nd = 3;
  p.src = src;
  p.wei = wei;
  p.dst = dst;
  p.dequant = true;
  p.gelu_erf = gelu_erf;
  return p;
}

// The int8 GEMM and its epilogue (kernels/quantize.h: gemm_s8_dequantized). Where oneDNN's s8
// matmul runs (dot-product units, oneDNN 3.x) the epilogue is its own: per-column weights scales,
// then a per-row binary multiply and the bias as a binary add, written straight into out's dtype,
// so the (M, N) int32 accumulators never go to memory and back (a separate pass, 11% of a MiniLM
// int8 evaluation on a Xeon with AMX-INT8). Otherwise: gemm_s8 into an int32 workspace, then
// dequantize_gemm.
void gemm_s8_dequantized_impl(const Tensor& a, const Tensor& b, const Tensor& row_scale,
                              const Tensor& col_scale, const Tensor* bias, Tensor& out, bool gelu_erf,
                              bool compute) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(0);
  if (force_reference() || M == 0 || N == 0 || K == 0) {
    if (compute) ref::gemm_s8_dequantized(a, b, row_scale, col_scale, bias, out, gelu_erf);
    return;
  }
  if (epilogue_may_fuse(out.dtype()) && row_scale.stride(0) == 1 && col_scale.stride(0) == 1) {
    // A model's quantized weights in the kernel's own layout (packed_weight), else as they are.
    const bool weights = b.storage()->category() == MemCategory::quantized_weights;
    for (const bool packed : {weights, false}) {
      Plan plan;
      Problem& p = plan.run;
      p = dequant_problem(mat_of(a, false), mat_of(b, true), mat_of(out, false), gelu_erf);
      p.packed_wei = packed;
      p.row_scale = row_scale.data<float>();
      p.col_scale = col_scale.data<float>();
      if (bias) {
        p.bias = bias->data<float>();
        p.bias_stride = bias->size(0) > 1 ? bias->stride(0) : 1;
      }
      plan.entry = PrimitiveCache::instance().get(p);
      if (p.dst.row_major() && fast_entry(*plan.entry)) {
        Tensor held;  // the packed copy, alive until the GEMM has run
        if (plan.entry->packed) {
          held = packed_weight(b, *plan.entry, compute);
          p.wei.ptr = held.raw_data();
        }
        execute(plan, p, thread_scratch(out.device()), compute);
        return;
      }
      if (!packed) break;
    }
  }
  Tensor acc = Tensor::empty({M, N}, DType::i32, MemCategory::workspace, out.device());
  gemm_s8_impl(a, b, acc, compute);
  if (!compute) return;
  cpu::dequantize_gemm(acc, row_scale, col_scale, bias, out);
  if (gelu_erf) cpu::activation(Activation::gelu_erf, out, out);
}
}  // namespace

bool gemm_s8_epilogue_fused(DType out_dtype, int64_t m, int64_t n, int64_t k, bool gelu_erf) {
  if (!epilogue_may_fuse(out_dtype)) return false;
  const Problem p = dequant_problem(dense_mat(DType::i8, m, k), dense_mat(DType::i8, n, k).transposed(),
                                    dense_mat(out_dtype, m, n), gelu_erf);
  return fast_entry(*PrimitiveCache::instance().get(p));
}

void cpu::gemm_s8(const Tensor& a, const Tensor& b, Tensor& acc) { gemm_s8_impl(a, b, acc, true); }
void gemm_s8_workspace_only(const Tensor& a, const Tensor& b, Tensor& acc) { gemm_s8_impl(a, b, acc, false); }
void cpu::gemm_s8_dequantized(const Tensor& a, const Tensor& b, const Tensor& row_scale,
                              const Tensor& col_scale, const Tensor* bias, Tensor& out, bool gelu_erf) {
  gemm_s8_dequantized_impl(a, b, row_scale, col_scale, bias, out, gelu_erf, true);
}
void gemm_s8_dequantized_workspace_only(const Tensor& a, const Tensor& b, const Tensor& row_scale,
                                        const Tensor& col_scale, const Tensor* bias, Tensor& out,
                                        bool gelu_erf) {
  gemm_s8_dequantized_impl(a, b, row_scale, col_scale, bias, out, gelu_erf, false);
}
void cpu::set_s8_gemm_route(S8GemmRoute r) { g_s8_route.store(r, std::memory_order_relaxed); }

const char* gemm_s8_route() {
  if (force_reference()) return "reference (MIXTRAIN_FORCE_REFERENCE)";
  if (s8_via_f32())
    return "int8 through the fp32 GEMM in K blocks of 1024 (exact; this CPU has no VNNI or AMX-INT8, where "
           "oneDNN's int8 kernels saturate)";
  const CpuFeatures& f = cpu_features();
  if (f.amx_int8) return "oneDNN s8 matmul (AMX-INT8)";
  return f.avx512_vnni ? "oneDNN s8 matmul (AVX512-VNNI)" : "oneDNN s8 matmul (AVX-VNNI)";
}

GemmCacheStats gemm_cache_stats() { return PrimitiveCache::instance().stats(); }
void gemm_cache_clear() { PrimitiveCache::instance().clear(); }

}  // namespace mixtrain
