// The training loop: data -> forward -> loss -> backward -> clip -> optimizer step, with
// evaluation, per-step JSON logs and a summary. Used by `mixtrain train` and by the C++ API.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "mixtrain/models/gpt.h"

namespace mixtrain {

struct TrainOptions {
  std::string model = "gpt-nano";  // preset name or .json config path
  std::string data;                // text file; empty: the built-in corpus
  int64_t steps = 200;
  int64_t batch_size = 16;
  int64_t seq_len = 0;             // 0: the model's block_size
  float lr = 1e-3f;
  float min_lr_ratio = 0.1f;       // cosine decay ends at lr * min_lr_ratio
  int64_t warmup = 0;
  float weight_decay = 0.1f;
  float beta1 = 0.9f;
  float beta2 = 0.99f;
  float eps = 1e-8f;
  float grad_clip = 1.0f;          // 0 disables
  std::string optimizer = "adamw"; // adamw | sgd
  float momentum = 0.9f;           // sgd
  uint64_t seed = 1337;
  int64_t eval_every = 0;          // 0: only at the end
  int64_t eval_batches = 8;
  std::string log_jsonl;           // per-step JSON lines; empty: none
  int64_t log_every = 10;          // plain progress lines when stdout is not a terminal
  bool quiet = false;              // no progress output at all
  void validate() const;           // throws ArgumentError
};

struct TrainSummary {
  int64_t steps = 0;
  double final_train_loss = 0;
  double val_loss = 0;
  double unigram_baseline = 0;     // the validation loss of a byte-frequency model
  double tokens_per_s = 0;
  double model_flops_per_s = 0;
  double gemm_flops_per_s = 0;     // measured on this machine for the model's dtype
  double mfu = 0;
  int64_t parameters = 0;
  double elapsed_s = 0;
  nlohmann::ordered_json to_json() const;
};

// A non-finite loss in fp32 training: the run stops; the log up to that step is kept.
class NonFiniteLossError : public Error {
 public:
  NonFiniteLossError(int64_t step, double loss);
  int64_t step;
};
// Exit code of `mixtrain train` for a non-finite loss (bad input is 2).
constexpr int kExitNonFiniteLoss = 3;

TrainSummary train(const TrainOptions& opt);

// GF/s of one GEMM shape in `dtype` (f32 out), best of repeated runs for ~`seconds`.
double measure_gemm_flops(DType dtype, int64_t m, int64_t n, int64_t k, double seconds);

}  // namespace mixtrain
