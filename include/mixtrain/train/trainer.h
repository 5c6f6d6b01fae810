// `mixtrain train` as a function: builds the GPT, the optimizer, the precision mode and the data
// from TrainOptions (train/train_options.h), attaches the hooks the options ask for (step log,
// progress, fault injection, checkpoints, profiling) to a TrainingRun (train/training_run.h, the
// loop itself) and runs it: language-model pre-training, one of the recipes of train/recipe.h.
#pragma once
#include <cstdint>
#include <functional>

#include "mixtrain/tensor/dtype.h"
#include "mixtrain/train/memory_prediction.h"
#include "mixtrain/train/train_options.h"
#include "mixtrain/train/training_run.h"

namespace mixtrain {

// Exit code of `mixtrain train` for a diverged run (bad input is 2).
constexpr int kExitDiverged = 3;

TrainSummary train(const TrainOptions& opt);
// train() of the run options it is given with `lm` as the task: the run function the task-generic
// commands take (compare_precisions, bench_task, task_memory_report).
std::function<TrainSummary(const RunOptions&)> train_with(LmOptions lm);

// The run train(o) makes, predicted (train/memory_prediction.h): train(o) on meta, quietly, with
// no files written (no checkpoints, logs or resume) and without the final GEMM-rate measurement.
// Throws what train(o) throws for bad options.
MemoryPrediction predict_train_memory(const TrainOptions& o);

}  // namespace mixtrain
