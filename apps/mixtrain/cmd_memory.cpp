// `mixtrain memory`: how much memory a training run needs. First the prediction from the model's
// shape alone (models/gpt_memory.h: no tensor allocated), then, unless --predict-only, the peaks
// the allocator's tracker measures over a few real training steps, side by side with the relative
// error per category, and the process's peak RSS.
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "mixtrain/models/gpt_memory.h"
#include "train_options.h"

namespace mixtrain::cli {
namespace {

struct MemoryFlags {
  std::string json;
  bool predict_only = false;
  int terms = 16;
};

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// (predicted - measured) / measured; NaN when nothing was measured.
double rel_error(int64_t predicted, int64_t measured) {
  if (measured == 0) return predicted == 0 ? 0.0 : NAN;
  return static_cast<double>(predicted - measured) / static_cast<double>(measured);
}

nlohmann::ordered_json by_category(const std::array<int64_t, kNumMemCategories>& bytes) {
  nlohmann::ordered_json j;
  for (size_t c = 0; c < kNumMemCategories; ++c)
    j[std::string(mem_category_name(static_cast<MemCategory>(c)))] = bytes[c];
  return j;
}

nlohmann::ordered_json json_number(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nullptr;
}

void print_error_cell(double e) {
  if (std::isfinite(e))
    std::printf(" %+8.1f%%", 100 * e);
  else
    std::printf(" %9s", "-");
}

}  // namespace

void register_memory(CLI::App& app, GlobalOptions& g, std::vector<Command>& commands) {
  auto* sub = app.add_subcommand(
      "memory", "Predict a training run's peak memory by category from the model's shape, then measure it");
  auto f = std::make_shared<TrainFlags>();
  f->opt.steps = 3;
  f->opt.eval_batches = 1;
  auto m = std::make_shared<MemoryFlags>();
  add_train_flags(sub, *f, /*with_precision=*/true);
  sub->add_flag("--predict-only", m->predict_only, "Only the prediction: no tensor allocated, no training");
  sub->add_option("--json", m->json, "Also write predicted and measured bytes as JSON to FILE");
  sub->add_option("--terms", m->terms, "Tensors listed from the predicted peak (largest first)")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  commands.push_back(
      {[sub] { return sub->parsed(); },
       [&g, f, m] {
         apply_global_options(g);
         f->finish();
         TrainOptions o = f->opt;
         const GptConfig cfg = GptConfig::from_preset_or_file(o.model);
         const GptMemoryOptions mo = memory_options(o);
         const GptMemoryPrediction p = predict_gpt_memory(cfg, mo);
         const int64_t T = o.seq_len > 0 ? o.seq_len : cfg.block_size;

         // The measurement: a real run of `train` with the same options (quiet, no MFU measurement).
         bool measured = false;
         MemorySnapshot snap;
         int64_t rss = 0;
         if (!m->predict_only) {
           o.validate();
           o.quiet = true;
           o.measure_gemm_rate = false;
           try {
             train(o);
           } catch (const DivergedError&) {
             // The steps ran; their memory is what is asked for.
           }
           snap = MemoryTracker::global().snapshot();
           rss = process_peak_rss_bytes();
           measured = true;
         }

         std::printf("%s: %lld parameters, %s, batch %lld, seq %lld, %s%s%s\n", cfg.name.c_str(),
                     static_cast<long long>(p.parameters),
                     std::string(precision_spec(o.precision).name).c_str(),
                     static_cast<long long>(o.batch_size), static_cast<long long>(T), std::string(optimizer_kind_name(o.optimizer)).c_str(),
                     o.checkpoint_activations ? ", activation checkpointing" : "",
                     precision_spec(o.precision).param_dtype != DType::f32
                         ? (", " + std::string(update_rounding_name(o.update_rounding)) + " rounding").c_str()
                         : "");
         std::printf("predicted peak %.1f MiB, at %s\n\n", mib(p.peak_bytes), p.peak_moment.c_str());
         std::printf("%-16s %14s", "category (peak)", "predicted MiB");
         if (measured) std::printf(" %13s %9s", "measured MiB", "error");
         std::printf("\n");
         for (size_t c = 0; c < kNumMemCategories; ++c) {
           if (p.peak_by_category[c] == 0 && (!measured || snap.peak[c] == 0)) continue;
           std::printf("%-16s %14.2f", std::string(mem_category_name(static_cast<MemCategory>(c))).c_str(),
                       mib(p.peak_by_category[c]));
           if (measured) {
             std::printf(" %13.2f", mib(snap.peak[c]));
             print_error_cell(rel_error(p.peak_by_category[c], snap.peak[c]));
           }
           std::printf("\n");
         }
         std::printf("%-16s %14.2f", "peak total", mib(p.peak_bytes));
         if (measured) {
           std::printf(" %13.2f", mib(snap.peak_total));
           print_error_cell(rel_error(p.peak_bytes, snap.peak_total));
         }
         std::printf("\n");
         if (measured) std::printf("%-16s %14s %13.2f\n", "process peak RSS", "", mib(rss));

         if (m->terms > 0 && !p.terms.empty()) {
           std::printf("\nalive at the predicted peak (largest first):\n");
           std::printf("  %10s %6s  %-16s %s\n", "MiB", "count", "category", "tensor");
           int64_t rest = 0, rest_n = 0;
           for (size_t i = 0; i < p.terms.size(); ++i) {
             const MemoryTerm& t = p.terms[i];
             if (static_cast<int>(i) >= m->terms) {
               rest += t.bytes;
               rest_n += t.count;
               continue;
             }
             std::printf("  %10.2f %6lld  %-16s %s\n", mib(t.bytes), static_cast<long long>(t.count),
                         std::string(mem_category_name(t.category)).c_str(), t.name.c_str());
           }
           if (rest_n > 0)
             std::printf("  %10.2f %6lld  (the rest)\n", mib(rest), static_cast<long long>(rest_n));
         }
         for (const std::string& n : p.notes) std::printf("note: %s\n", n.c_str());

         if (!m->json.empty()) {
           nlohmann::ordered_json j;
           j["model"] = cfg.to_json();
           nlohmann::ordered_json c;
           c["precision"] = precision_spec(o.precision).name;
           c["batch_size"] = o.batch_size;
           c["seq_len"] = T;
           c["checkpoint_activations"] = o.checkpoint_activations;
           c["optimizer"] = std::string(optimizer_kind_name(o.optimizer));
           c["update_rounding"] = update_rounding_name(o.update_rounding);
           c["grad_accum"] = o.grad_accum;
           c["steps"] = o.steps;
           j["config"] = c;
           j["parameters"] = p.parameters;
           nlohmann::ordered_json pj;
           pj["peak_bytes"] = p.peak_bytes;
           pj["by_category"] = by_category(p.peak_by_category);
           pj["peak_moment"] = p.peak_moment;
           pj["at_peak_by_category"] = by_category(p.at_peak);
           pj["terms"] = nlohmann::ordered_json::array();
           for (const MemoryTerm& t : p.terms)
             pj["terms"].push_back({{"name", t.name},
                                    {"category", std::string(mem_category_name(t.category))},
                                    {"count", t.count},
                                    {"bytes", t.bytes}});
           j["predicted"] = pj;
           if (measured) {
             nlohmann::ordered_json mj;
             mj["peak_bytes"] = snap.peak_total;
             mj["by_category"] = by_category(snap.peak);
             j["measured"] = mj;
             j["process_peak_rss_bytes"] = rss;
             nlohmann::ordered_json e;
             e["peak_bytes"] = json_number(rel_error(p.peak_bytes, snap.peak_total));
             nlohmann::ordered_json ec;
             for (size_t k = 0; k < kNumMemCategories; ++k)
               ec[std::string(mem_category_name(static_cast<MemCategory>(k)))] =
                   json_number(rel_error(p.peak_by_category[k], snap.peak[k]));
             e["by_category"] = ec;
             j["relative_error"] = e;
           } else {
             j["measured"] = nullptr;
             j["process_peak_rss_bytes"] = nullptr;
             j["relative_error"] = nullptr;
           }
           j["notes"] = p.notes;
           write_file_atomic(m->json, j.dump(2) + "\n");
         }
         return 0;
       }});
}

}  // namespace mixtrain::cli
