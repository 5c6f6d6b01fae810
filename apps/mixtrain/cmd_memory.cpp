// `mixtrain memory`: prints memory_report (train/memory_report.h), the predicted peaks by category
// and, unless --predict-only, the measured ones beside them with the relative errors and the
// process's peak RSS, as a table and optionally as JSON.
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "commands.h"
#include "finetune_options.h"
#include "mixtrain/dist/communicator.h"
#include "mixtrain/train/finetune.h"
#include "mixtrain/train/memory_report.h"
#include "mixtrain/train/output_paths.h"
#include "mixtrain/train/results_json.h"
#include "train_options.h"

namespace mixtrain::cli {
namespace {

struct MemoryFlags {
  std::string json;
  bool predict_only = false;
  int terms = 16;
  int ranks = 1;
};

nlohmann::ordered_json by_category(const std::array<int64_t, kNumMemCategories>& bytes) {
  nlohmann::ordered_json j;
  for (size_t c = 0; c < kNumMemCategories; ++c)
    j[std::string(mem_category_name(static_cast<MemCategory>(c)))] = bytes[c];
  return j;
}

// What was measured: a GPT (--task lm) or a fine-tune (the encoder directory, the task, max_len).
struct Subject {
  std::string title;             // the table's first words: "gpt-nano", "MiniLM fine-tuned on finefoods"
  nlohmann::ordered_json model;  // the JSON's "model"
  const char* length_key;        // "seq_len" or "max_len"
  int64_t length;
};

Subject lm_subject(const MemoryReport& r) {
  return {r.model.name, json_of(r.model.to_json_text()), "seq_len", r.seq_len};
}

Subject finetune_subject(const FinetuneOptions& o) {
  const std::string dir = o.model_dir.empty() ? "the built-in MiniLM" : o.model_dir;
  const std::string task = !o.task.empty() ? o.task : o.train_path.empty() ? "finefoods" : o.train_path;
  nlohmann::ordered_json m;
  m["dir"] = o.model_dir.empty() ? nullptr : nlohmann::ordered_json(o.model_dir);
  m["task"] = task;
  return {dir + " fine-tuned on " + task, m, "max_len", o.max_len};
}

nlohmann::ordered_json to_json(const MemoryReport& r, const Subject& subject, const RunOptions& o,
                               int ranks) {
  const MemoryPrediction& p = r.predicted;
  nlohmann::ordered_json j;
  j["model"] = subject.model;
  nlohmann::ordered_json c;
  c["precision"] = precision_spec(o.precision).name;
  c["batch_size"] = o.batch_size;
  c[subject.length_key] = subject.length;
  c["checkpoint_activations"] = o.checkpoint_activations;
  c["fused_lm_head"] = o.fused_lm_head;
  c["recompute_attention"] = o.recompute_attention;
  c["optimizer"] = std::string(optimizer_kind_name(o.optimizer));
  c["update_rounding"] = update_rounding_name(o.update_rounding);
  c["optim_state"] = std::string(state_precision_name(o.optim_state));
  c["grad_accum"] = o.grad_accum;
  c["ranks"] = ranks;
  c["zero"] = o.data_parallel.zero_stage;
  c["steps"] = o.steps.value_or(0);
  j["config"] = c;
  j["parameters"] = p.parameters;
  nlohmann::ordered_json pj;
  pj["peak_bytes"] = p.peak_bytes;
  pj["by_category"] = by_category(p.peak_by_category);
  pj["peak_moment"] = p.peak_moment;
  pj["at_peak_by_category"] = by_category(p.at_peak);
  pj["terms"] = json_of(memory_terms_json_text(p.terms));
  j["predicted"] = pj;
  if (r.measured) {
    const MeasuredMemory& m = *r.measured;
    nlohmann::ordered_json mj;
    mj["peak_bytes"] = m.peaks.peak_total;
    mj["by_category"] = by_category(m.peaks.peak);
    j["measured"] = mj;
    j["process_peak_rss_bytes"] = m.process_peak_rss_bytes;
    nlohmann::ordered_json e;
    e["peak_bytes"] = finite_or_null(m.peak_error);
    nlohmann::ordered_json ec;
    for (size_t k = 0; k < kNumMemCategories; ++k)
      ec[std::string(mem_category_name(static_cast<MemCategory>(k)))] =
          finite_or_null(m.error_by_category[k]);
    e["by_category"] = ec;
    j["relative_error"] = e;
  } else {
    j["measured"] = nullptr;
    j["process_peak_rss_bytes"] = nullptr;
    j["relative_error"] = nullptr;
  }
  j["notes"] = p.notes;
  return j;
}

void print_error_cell(double e) {
  if (std::isfinite(e))
    std::printf(" %+8.1f%%", 100 * e);
  else
    std::printf(" %9s", "-");
}

void print_table(const MemoryReport& r, const Subject& subject, const RunOptions& o, int max_terms,
                 int ranks) {
  const MemoryPrediction& p = r.predicted;
  const MeasuredMemory* m = r.measured ? &*r.measured : nullptr;
  std::printf("%s: %lld parameters, %s, batch %lld, %s %lld, %s%s%s%s%s\n", subject.title.c_str(),
              static_cast<long long>(p.parameters), std::string(precision_spec(o.precision).name).c_str(),
              static_cast<long long>(o.batch_size), subject.length_key[0] == 's' ? "seq" : "max_len",
              static_cast<long long>(subject.length), std::string(optimizer_kind_name(o.optimizer)).c_str(),
              o.checkpoint_activations ? ", activation checkpointing" : "",
              o.fused_lm_head ? ", fused LM head" : "", o.recompute_attention ? ", attention recomputed" : "",
              precision_spec(o.precision).param_dtype != DType::f32
                  ? (", " + std::string(update_rounding_name(o.update_rounding)) + " rounding").c_str()
                  : "");
  if (ranks > 1)
    std::printf("per rank (rank 0) of %d data-parallel ranks%s\n", ranks,
                o.data_parallel.zero_stage == 1   ? ", ZeRO stage 1 (optimizer state sharded)"
                : o.data_parallel.zero_stage == 2 ? ", ZeRO stage 2 (optimizer state and gradients sharded)"
                : o.data_parallel.zero_stage == 3
                    ? ", ZeRO stage 3 (optimizer state, gradients and parameters sharded)"
                    : "");
  std::printf("predicted peak %.1f MiB, at %s\n\n", mib(p.peak_bytes), p.peak_moment.c_str());
  std::printf("%-16s %14s", "category (peak)", "predicted MiB");
  if (m) std::printf(" %13s %9s", "measured MiB", "error");
  std::printf("\n");
  for (size_t c = 0; c < kNumMemCategories; ++c) {
    if (p.peak_by_category[c] == 0 && (!m || m->peaks.peak[c] == 0)) continue;
    std::printf("%-16s %14.2f", std::string(mem_category_name(static_cast<MemCategory>(c))).c_str(),
                mib(p.peak_by_category[c]));
    if (m) {
      std::printf(" %13.2f", mib(m->peaks.peak[c]));
      print_error_cell(m->error_by_category[c]);
    }
    std::printf("\n");
  }
  std::printf("%-16s %14.2f", "peak total", mib(p.peak_bytes));
  if (m) {
    std::printf(" %13.2f", mib(m->peaks.peak_total));
    print_error_cell(m->peak_error);
  }
  std::printf("\n");
  if (m) std::printf("%-16s %14s %13.2f\n", "process peak RSS", "", mib(m->process_peak_rss_bytes));

  if (max_terms > 0 && !p.terms.empty()) {
    std::printf("\nalive at the predicted peak (largest first):\n");
    std::printf("  %10s %6s  %-16s %s\n", "MiB", "count", "category", "tensor");
    int64_t rest = 0, rest_n = 0;
    for (size_t i = 0; i < p.terms.size(); ++i) {
      const MemoryTerm& t = p.terms[i];
      if (static_cast<int>(i) >= max_terms) {
        rest += t.bytes;
        rest_n += t.count;
        continue;
      }
      std::printf("  %10.2f %6lld  %-16s %s\n", mib(t.bytes), static_cast<long long>(t.count),
                  std::string(mem_category_name(t.category)).c_str(), t.name.c_str());
    }
    if (rest_n > 0) std::printf("  %10.2f %6lld  (the rest)\n", mib(rest), static_cast<long long>(rest_n));
  }
  for (const std::string& n : p.notes) std::printf("note: %s\n", n.c_str());
}

}  // namespace

void register_memory(CLI::App& app, GlobalOptions& g, std::vector<Command>& commands) {
  auto* sub = app.add_subcommand(
      "memory", "Predict a training run's peak memory by category from the model's shape, then measure it");
  auto f = std::make_shared<TrainFlags>();
  f->opt.steps = 3;
  f->opt.eval_batches = 1;
  auto m = std::make_shared<MemoryFlags>();
  auto task = std::make_shared<TaskFlags>();
  add_train_flags(sub, *f, /*with_precision=*/true);
  add_task_flags(sub, *task);
  sub->add_flag("--predict-only", m->predict_only, "Only the prediction: no tensor allocated, no training");
  sub->add_option("--ranks", m->ranks,
                  "Predict one rank's memory in a data-parallel run of N ranks (measured too when started by "
                  "mpirun -np N; otherwise only predicted)")
      ->capture_default_str();
  sub->add_option("--zero", f->opt.data_parallel.zero_stage,
                  "With --ranks: 1 shards the optimizer state (ZeRO stage 1), 2 the gradients too (stage 2), "
                  "3 the parameters too (stage 3)")
      ->capture_default_str();
  sub->add_option("--bucket-mb", f->bucket_mb,
                  "With --ranks: MiB of gradients per bucket (ZeRO-2 holds its part and a few buckets)")
      ->capture_default_str();
  sub->add_option("--grad-reduce-dtype", f->grad_reduce_dtype,
                  "With --ranks: sum gradients in fp32, bf16, int8 or fp8")
      ->capture_default_str();
  sub->add_option("--allgather-dtype", f->allgather_dtype,
                  "With --ranks and --zero 3: gather parameters in fp32, bf16, int8 or fp8")
      ->capture_default_str();
  add_json_option(sub, m->json, "Also the predicted and measured bytes");
  sub->add_option("--terms", m->terms, "Tensors listed from the predicted peak (largest first)")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  commands.push_back(
      {[sub] { return sub->parsed(); },
       [&g, f, m, task, sub] {
         apply_global_options(g);
         m->json = json_output(*sub, m->json);
         f->finish();
         std::optional<FinetuneOptions> fo = task->short_finetune(*f);  // --steps 3, --eval-batches 1
         // --json checked with the run's own outputs before the prediction and the measured run
         // (otherwise an unwritable path would be found after both).
         if (!m->json.empty()) {
           RunPaths paths = fo ? run_paths(fo->train) : train_run_paths(f->opt);
           if (fo)
             for (const auto& [what, path] :
                  {std::pair{"--model", fo->model_dir}, std::pair{"--train", fo->train_path},
                   std::pair{"--test", fo->test_path}})
               if (!path.empty()) paths.inputs.push_back({what, path});
           paths.outputs.push_back({"--json", m->json});
           check_run_paths(paths);
         }
         if (m->ranks < 1 || m->ranks > (1 << 20))
           throw ArgumentError("--ranks must be in [1, 1048576], got " + std::to_string(m->ranks));
         // Under mpirun -np N the measured run is data parallel too, and rank 0 reports; without
         // it a prediction for N > 1 ranks cannot be measured here.
         f->opt.world = &join_world("memory");
         const bool rank0 = f->opt.world->rank() == 0;
         if (f->opt.world->size() > 1 && f->opt.world->size() != m->ranks)
           throw ArgumentError("--ranks " + std::to_string(m->ranks) + " differs from mpirun's " +
                               std::to_string(f->opt.world->size()) + " ranks");
         const bool measurable = m->ranks == f->opt.world->size();
         if (!measurable && !m->predict_only && rank0)
           std::printf("(measured only under mpirun -np %d: predicted only)\n", m->ranks);
         const bool predict_only = m->predict_only || !measurable;
         MemoryReport r;
         if (fo) {
           fo->train.world = f->opt.world;
           r = finetune_memory_report(*fo, predict_only, m->ranks);
         } else {
           r = memory_report(f->opt, predict_only, m->ranks);
         }
         if (!rank0) return 0;
         const Subject subject = fo ? finetune_subject(*fo) : lm_subject(r);
         const RunOptions& o = fo ? fo->train : static_cast<const RunOptions&>(f->opt);
         print_table(r, subject, o, m->terms, m->ranks);
         if (!m->json.empty())
           write_output_file(m->json, to_json(r, subject, o, m->ranks).dump(2) + "\n", "--json");
         return 0;
       }});
}

}  // namespace mixtrain::cli
