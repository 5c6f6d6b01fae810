// The TensorBoard hook (train/tensorboard_hook.h).
#include "mixtrain/train/tensorboard_hook.h"

#include <cstdio>
#include <utility>
#include <vector>

#include "mixtrain/core/error.h"
#include "mixtrain/tensor/memory.h"
#include "train/event_file.h"

namespace mixtrain {

struct TensorBoardHook::Impl {
  std::string dir;
  bool resuming = false;
  std::unique_ptr<EventFileWriter> writer;
  std::string none;
  std::vector<std::pair<std::string, float>> extra;  // add_scalar's, for the next event
};

TensorBoardHook::TensorBoardHook(std::string dir, bool resuming) : impl_(std::make_unique<Impl>()) {
  if (dir.empty()) throw ArgumentError({"tensorboard_dir"}, "tensorboard_dir is empty");
  if (!resuming && !list_event_files(dir).empty())
    throw ArgumentError({"tensorboard_dir"},
                        "tensorboard_dir " + dir +
                            " already holds event files of another run (resume that run, or "
                            "choose another directory)");
  impl_->dir = std::move(dir);
  impl_->resuming = resuming;
}

TensorBoardHook::~TensorBoardHook() = default;

const std::string& TensorBoardHook::file() const {
  return impl_->writer ? impl_->writer->path() : impl_->none;
}

void TensorBoardHook::on_run_start(TrainingRun& run) {
  if (impl_->resuming) {
    const int64_t dropped = trim_event_files(impl_->dir, run.start_step());
    if (dropped > 0)
      std::fprintf(stderr, "mixtrain: warning: dropped %lld TensorBoard events after step %lld in %s\n",
                   static_cast<long long>(dropped), static_cast<long long>(run.start_step()),
                   impl_->dir.c_str());
  }
  impl_->writer = std::make_unique<EventFileWriter>(impl_->dir);
}

void TensorBoardHook::on_step_end(TrainingRun& run, const StepRecord& r) {
  if (!impl_->writer) return;
  ScalarEvent e;
  e.step = r.step;
  auto add = [&](const char* tag, double v) { e.values.emplace_back(tag, static_cast<float>(v)); };
  add("train/loss", r.loss);
  add("train/lr", r.lr);
  add("train/grad_norm", r.grad_norm);
  add("train/tokens_per_s", r.tokens_per_s);
  add("amp/loss_scale", r.loss_scale);
  add("amp/skipped", r.skipped ? 1 : 0);
  add("amp/found_inf", r.found_inf ? 1 : 0);
  add("amp/overflows", static_cast<double>(run.summary().overflows));
  if (r.evaluated) {
    add("val/loss", r.val_loss);
    add("val/accuracy", r.val_accuracy);
  }
  const MemorySnapshot mem = MemoryTracker::global().snapshot();
  for (size_t c = 0; c < kNumMemCategories; ++c) {
    if (mem.peak[c] == 0) continue;
    e.values.emplace_back("memory/" + std::string(mem_category_name(static_cast<MemCategory>(c))) + "_mib",
                          static_cast<float>(static_cast<double>(mem.peak[c]) / (1 << 20)));
  }
  e.values.emplace_back("memory/total_mib",
                        static_cast<float>(static_cast<double>(mem.peak_total) / (1 << 20)));
  for (auto& extra : impl_->extra) e.values.push_back(std::move(extra));
  impl_->extra.clear();
  impl_->writer->write(e);
}

void TensorBoardHook::add_scalar(std::string tag, float value) {
  impl_->extra.emplace_back(std::move(tag), value);
}

void TensorBoardHook::on_run_end(TrainingRun&, TrainSummary&) { impl_->writer.reset(); }

}  // namespace mixtrain
