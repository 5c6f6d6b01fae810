// LmWindows: a TextCorpus as a DataSource.
#include <string>

#include "mixtrain/core/error.h"
#include "mixtrain/data/data_source.h"

namespace mixtrain {

LmWindows::LmWindows(const TextCorpus& corpus, int64_t batch_size, int64_t seq_len, uint64_t seed)
    : corpus_(corpus), B_(batch_size), T_(seq_len), seed_(seed) {
  if (batch_size < 1) throw ArgumentError("batch_size must be positive, got " + std::to_string(batch_size));
  corpus.check_window(seq_len);
}

void LmWindows::train_batch(int64_t position, Batch& out) const {
  corpus_.train_batch(B_, T_, seed_, position, out.inputs, out.targets);
  out.rows = B_;
}

int64_t LmWindows::num_eval_batches() const { return corpus_.num_val_batches(B_, T_); }

void LmWindows::eval_batch(int64_t index, Batch& out) const {
  out.rows = corpus_.val_batch(index, B_, T_, out.inputs, out.targets);
}

}  // namespace mixtrain
