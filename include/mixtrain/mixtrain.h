// mixtrain's public API in one include: the number formats and their conversions, precision
// modes and autocast, tensors, the GPT model, the optimizers, the data sources, the training
// engine (TrainingRun and its hooks), the tasks it runs (Recipe, run_recipe), the library forms of `mixtrain
// train`, `compare`, `memory` and `bench train`, the fine-tune (`finetune`, `classify`), and loading weights.
// Everything under include/mixtrain is installed; what is under src/ is internal.
//
//   #include "mixtrain/mixtrain.h"
//   find_package(mixtrain REQUIRED)  +  target_link_libraries(app PRIVATE mixtrain::mixtrain)
#pragma once

#include "mixtrain/amp/precision.h"
#include "mixtrain/checkpoint/load_model.h"
#include "mixtrain/core/error.h"
#include "mixtrain/data/classification_batches.h"
#include "mixtrain/data/data_source.h"
#include "mixtrain/data/text_corpus.h"
#include "mixtrain/dist/communicator.h"
#include "mixtrain/kernels/threads.h"
#include "mixtrain/models/encoder.h"
#include "mixtrain/models/generate.h"
#include "mixtrain/models/gpt.h"
#include "mixtrain/models/model.h"
#include "mixtrain/numeric/bf16.h"
#include "mixtrain/numeric/convert.h"
#include "mixtrain/numeric/fp16.h"
#include "mixtrain/numeric/fp8.h"
#include "mixtrain/numeric/stochastic.h"
#include "mixtrain/optim/adamw.h"
#include "mixtrain/optim/mixed_precision.h"
#include "mixtrain/optim/optimizer.h"
#include "mixtrain/optim/schedule.h"
#include "mixtrain/optim/sgd.h"
#include "mixtrain/tensor/tensor.h"
#include "mixtrain/train/bench_train.h"
#include "mixtrain/train/classify.h"
#include "mixtrain/train/compare.h"
#include "mixtrain/train/data_parallel.h"
#include "mixtrain/train/finetune.h"
#include "mixtrain/train/memory_report.h"
#include "mixtrain/train/recipe.h"
#include "mixtrain/train/run_hooks.h"
#include "mixtrain/train/tensorboard_hook.h"
#include "mixtrain/train/train_options.h"
#include "mixtrain/train/trainer.h"
#include "mixtrain/train/training_run.h"
