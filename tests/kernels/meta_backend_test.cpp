// The meta backend (kernels/meta/meta_ops.h) against the CPU backend, op by op: for the same
// arguments, an op on meta tensors must take the same tracked temporaries as on CPU tensors (the
// highest extra bytes during the op) and keep the same bytes after it, for contiguous and strided
// layouts, every storage dtype and each kind of GEMM (converted fp16 inputs, an fp32 output
// rounded afterwards, a bias, a batch, a transposed output). The whole-run check is
// tests/train/memory_prediction_test.cpp; this one names the op that drifted.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "kernels/attention_ops.h"
#include "kernels/ops_backward.h"
#include "mixtrain/kernels/gemm_info.h"
#include "mixtrain/kernels/ops.h"
#include "mixtrain/tensor/tensor.h"

namespace mixtrain {
namespace {

struct Footprint {
  int64_t extra_peak = 0;  // highest bytes above the inputs during the op
  int64_t kept = 0;        // bytes above the inputs after it
  friend bool operator==(const Footprint&, const Footprint&) = default;
};

// `setup` makes the op's arguments on the default device and returns the op.
using Setup = std::function<std::function<void()>()>;

Footprint measure(Device d, const Setup& setup) {
  const DeviceScope scope(d);
  MemoryTracker& t = d.is_meta() ? MemoryTracker::meta() : MemoryTracker::global();
  std::function<void()> op = setup();
  gemm_scratch_release();
  const MemorySnapshot before = t.snapshot();
  t.reset_peaks();
  op();
  const MemorySnapshot after = t.snapshot();
  const Footprint f{after.peak_total - before.live_total, after.live_total - before.live_total};
  gemm_scratch_release();
  return f;
}

void expect_same(const std::string& what, const Setup& setup) {
  const Footprint cpu = measure(Device::cpu(), setup), meta = measure(Device::meta(), setup);
  EXPECT_EQ(meta.extra_peak, cpu.extra_peak) << what << ": temporaries during the op";
  EXPECT_EQ(meta.kept, cpu.kept) << what << ": bytes kept after the op";
}

Tensor rnd(const Shape& s, DType t, uint64_t seed = 1) { return Tensor::randn(s, t, seed); }
// A (rows, cols) view whose last dim is not contiguous: the transpose of a (cols, rows) tensor.
Tensor strided(int64_t rows, int64_t cols, DType t) { return rnd({cols, rows}, t).transpose(0, 1); }
Tensor ids(int64_t n, int64_t V) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7) % V);
  return Tensor::from_ints(v, {n});
}

const DType kDtypes[] = {DType::f32, DType::bf16, DType::f16};

TEST(MetaBackend, GemmTakesTheCpuGemmsScratch) {
  for (DType t : kDtypes)
    for (DType out : {DType::f32, t}) {
      const std::string d = std::string(dtype_name(t)) + "->" + std::string(dtype_name(out));
      expect_same("gemm " + d, [=] {
        Tensor a = rnd({64, 48}, t), b = rnd({48, 40}, t);
        return [=]() mutable { Tensor c = matmul(a, b, false, false, out); };
      });
      expect_same("gemm trans_b with bias " + d, [=] {
        Tensor a = rnd({64, 48}, t), b = rnd({40, 48}, t), bias = rnd({40}, DType::f32);
        Tensor c = Tensor::empty({64, 40}, out);
        GemmOptions o;
        o.trans_b = true;
        return [=]() mutable { gemm(a, b, c, o, &bias); };
      });
      expect_same("batched gemm with beta " + d, [=] {
        Tensor a = rnd({3, 32, 24}, t), b = rnd({3, 24, 16}, t), c = rnd({3, 32, 16}, out);
        GemmOptions o;
        o.beta = 1.f;
        return [=]() mutable { gemm(a, b, c, o); };
      });
      expect_same("gemm into a transposed output " + d, [=] {
        Tensor a = rnd({32, 24}, t), b = rnd({24, 16}, t);
        Tensor c = Tensor::empty({16, 32}, out).transpose(0, 1);
        return [=]() mutable { gemm(a, b, c); };
      });
    }
}

TEST(MetaBackend, ElementwiseAndReductions) {
  for (DType t : kDtypes) {
    const std::string d(dtype_name(t));
    expect_same("add strided " + d, [=] {
      Tensor a = strided(33, 20, t), b = rnd({33, 20}, t), out = Tensor::empty({20, 33}, t).transpose(0, 1);
      return [=]() mutable { add(a, b, out); };
    });
    expect_same("mul by a strided row " + d, [=] {
      Tensor a = rnd({33, 20}, t), row = rnd({20, 2}, t).select(1, 0), out = Tensor::empty({33, 20}, t);
      return [=]() mutable { mul(a, row, out); };
    });
    expect_same("scale strided " + d, [=] {
      Tensor a = strided(17, 9, t), out = Tensor::empty({17, 9}, t);
      return [=]() mutable { scale(a, 2.f, out); };
    });
    expect_same("gelu into strided " + d, [=] {
      Tensor x = rnd({17, 9}, t), out = Tensor::empty({9, 17}, t).transpose(0, 1);
      return [=]() mutable { gelu(x, out); };
    });
    expect_same("reduce strided " + d, [=] {
      Tensor x = strided(40, 30, t);
      return [=]() { (void)reduce(x, ReduceOp::sum); };
    });
    expect_same("reduce_last into strided " + d, [=] {
      Tensor x = rnd({12, 30}, t), out = rnd({12, 2}, DType::f32).select(1, 1);
      return [=]() mutable { reduce_last(x, ReduceOp::max, out); };
    });
    expect_same("argmax_last strided " + d, [=] {
      Tensor x = strided(12, 30, t), out = Tensor::empty({12}, DType::i32);
      return [=]() mutable { argmax_last(x, out); };
    });
    expect_same("sum_to_row_accumulate " + d, [=] {
      Tensor x = rnd({12, 30}, t), out = rnd({30}, t);
      return [=]() mutable { sum_to_row_accumulate(x, out); };
    });
    expect_same("add_inplace strided " + d, [=] {
      Tensor acc = rnd({12, 30}, t), x = strided(12, 30, t);
      return [=]() mutable { add_inplace(acc, x); };
    });
  }
}

TEST(MetaBackend, NormalisationSoftmaxEmbeddingLoss) {
  for (DType t : kDtypes) {
    const std::string d(dtype_name(t));
    expect_same("layer_norm, strided input and statistics " + d, [=] {
      Tensor x = strided(24, 16, t), w = rnd({16}, t), b = rnd({16}, t), out = Tensor::empty({24, 16}, t);
      Tensor mean = rnd({24, 2}, DType::f32).select(1, 0), rstd = rnd({24, 2}, DType::f32).select(1, 1);
      Tensor xhat = Tensor::empty({16, 24}, t).transpose(0, 1);
      return [=]() mutable { layer_norm(x, w, b, 1e-5f, out, &mean, &rstd, &xhat); };
    });
    expect_same("layer_norm_backward strided " + d, [=] {
      Tensor x = strided(24, 16, t), w = rnd({16}, t), mean = rnd({24}, DType::f32),
             rstd = rnd({24}, DType::f32);
      Tensor dout = strided(24, 16, t), dx = Tensor::empty({16, 24}, t).transpose(0, 1);
      Tensor dw = rnd({16}, t), db = rnd({16}, t);
      return [=]() mutable { layer_norm_backward(x, w, mean, rstd, dout, dx, dw, db); };
    });
    expect_same("softmax_last strided " + d, [=] {
      Tensor x = strided(20, 12, t), out = Tensor::empty({20, 12}, t);
      return [=]() mutable { softmax_last(x, out); };
    });
    expect_same("causal_softmax and backward " + d, [=] {
      Tensor x = rnd({2, 12, 12}, t).transpose(1, 2), y = Tensor::empty({2, 12, 12}, t);
      Tensor dy = rnd({2, 12, 12}, t).transpose(1, 2), dx = Tensor::empty({2, 12, 12}, t);
      return [=]() mutable {
        causal_softmax(x, 0.5f, y);
        causal_softmax_backward(y, dy, 0.5f, dx);
        softmax_last_backward(y, dy, dx);
      };
    });
    expect_same("gelu_backward strided " + d, [=] {
      Tensor x = strided(20, 12, t), dout = rnd({20, 12}, t), dx = Tensor::empty({12, 20}, t).transpose(0, 1);
      return [=]() mutable { gelu_backward(x, dout, dx); };
    });
    expect_same("activation and backward strided " + d, [=] {
      Tensor x = strided(20, 12, t), dout = rnd({20, 12}, t), dx = Tensor::empty({12, 20}, t).transpose(0, 1);
      Tensor out = Tensor::empty({12, 20}, t).transpose(0, 1);
      return [=]() mutable {
        for (Activation k : {Activation::gelu_erf, Activation::tanh, Activation::relu}) {
          activation(k, x, out);
          activation_backward(k, x, dout, dx);
        }
      };
    });
    expect_same("masked_softmax strided " + d, [=] {
      Tensor x = rnd({4, 12, 12}, t).transpose(1, 2), y = Tensor::empty({4, 12, 12}, t);
      Tensor mask = Tensor::from_ints(std::vector<int32_t>(24, 1), {2, 12});
      return [=]() mutable { masked_softmax(x, mask, 0.5f, y); };
    });
    expect_same("embedding and backward " + d, [=] {
      Tensor w = strided(50, 8, t), i = ids(30, 50), out = Tensor::empty({8, 30}, t).transpose(0, 1);
      Tensor dout = strided(30, 8, t), dw = rnd({50, 8}, t);
      return [=]() mutable {
        embedding(w, i, out);
        embedding_backward(i, dout, dw);
      };
    });
    expect_same("cross_entropy with strided losses, and backward " + d, [=] {
      Tensor logits = strided(30, 50, t), tg = ids(30, 50), losses = rnd({30, 2}, DType::f32).select(1, 0);
      Tensor dl = Tensor::empty({50, 30}, t).transpose(0, 1);
      return [=]() mutable {
        (void)cross_entropy(logits, tg, &losses);
        cross_entropy_backward(logits, tg, 1.f, dl);
      };
    });
    expect_same("dropout_mask strided " + d, [=] {
      Tensor x = strided(20, 12, t), out = Tensor::empty({20, 12}, t);
      return [=]() mutable { dropout_mask(x, 0.25f, 7, 0, out); };
    });
  }
}

TEST(MetaDevice, TensorsChargeTheMetaTrackerAndHoldNoData) {
  const int64_t cpu_live = MemoryTracker::global().snapshot().live_total;
  const int64_t meta_live = MemoryTracker::meta().snapshot().live_total;
  EXPECT_EQ(default_device(), Device::cpu());
  {
    const DeviceScope meta(Device::meta());
    EXPECT_TRUE(default_device().is_meta());
    {
      const DeviceScope cpu(Device::cpu());  // scopes nest
      EXPECT_EQ(default_device(), Device::cpu());
    }
    Tensor a = Tensor::zeros({1000}, DType::f32, MemCategory::activations);
    Tensor b = Tensor::randn({10, 10}, DType::bf16, 3);  // an f32 draw cast to bf16: both charged
    EXPECT_TRUE(a.is_meta());
    EXPECT_EQ(a.device().to_string(), "meta");
    EXPECT_EQ(MemoryTracker::meta().snapshot().live_total - meta_live, 4000 + 200);
    EXPECT_EQ(MemoryTracker::global().snapshot().live_total, cpu_live);
    // Values read as zero; a meta tensor cannot be the source of a real one.
    EXPECT_EQ(b.to_floats(), std::vector<float>(100, 0.f));
    EXPECT_EQ(Tensor::full({1}, DType::f32, 5.0).item(), 0.0);
    a.fill(3.0);
    EXPECT_EQ(a.to_floats(), std::vector<float>(1000, 0.f));
    Tensor host = Tensor::zeros({1000}, DType::f32, MemCategory::activations, Device::cpu());
    a.copy_from(host);  // into meta: nothing to write
    EXPECT_THROW(host.copy_from(a), ArgumentError);
    // Distinct, aligned addresses that are not memory.
    EXPECT_NE(a.raw_data(), b.raw_data());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.raw_data()) % kTensorAlignment, 0u);
  }
  EXPECT_EQ(MemoryTracker::meta().snapshot().live_total, meta_live);
  EXPECT_EQ(default_device(), Device::cpu());
}

}  // namespace
}  // namespace mixtrain
