// The Model interface's default evaluation (models/model.h): loss and top-1 accuracy.
#include "mixtrain/models/model.h"

#include "mixtrain/kernels/ops.h"

namespace mixtrain {

EvalSums Model::evaluate_batch(const Batch& batch) {
  const ModelOutput out = forward_batch(batch, false, 0);
  EvalSums s;
  s.rows = batch.rows;
  s.loss_sum = out.loss.value().item() * static_cast<double>(batch.rows);
  const Tensor& logits = out.logits.value();  // (..., K)
  Shape lead(logits.shape().begin(), logits.shape().end() - 1);
  if (!(lead == batch.targets.shape()))
    throw ShapeError("Model::evaluate_batch: logits " + logits.to_string() + " do not match targets " +
                     batch.targets.to_string() + " (override evaluate_batch for this model)");
  Tensor predicted = Tensor::empty(lead, DType::i32, MemCategory::activations, logits.device());
  argmax_last(logits, predicted);
  if (predicted.is_meta()) return s;  // a memory prediction: no values to score
  const std::vector<int32_t> p = predicted.to_ints(), t = batch.targets.to_ints();
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == -1) continue;
    ++s.scored;
    if (p[i] == t[i]) ++s.correct;
  }
  return s;
}

}  // namespace mixtrain
