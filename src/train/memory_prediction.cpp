// Memory prediction on the meta device (train/memory_prediction.h).
//
// The meta allocator (tensor/meta.h) charges MemoryTracker::meta() and reports every allocation
// and free to the ledger below, which names each tensor by where it was made (tensor/alloc_site.h:
// module, op, step phase) and its shape and dtype, remembers the moment of the highest total, and
// afterwards replays its event log up to that moment to list what was alive then. The peaks
// themselves are the meta tracker's, the same counters a real run's tracker keeps.
#include "mixtrain/train/memory_prediction.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "mixtrain/kernels/gemm_info.h"
#include "mixtrain/tensor/device.h"
#include "tensor/alloc_site.h"
#include "tensor/meta.h"

namespace mixtrain {
namespace {

// "transformer.h.12.attn" -> "transformer.h.*.attn": the same tensor of every layer is one term.
std::string module_pattern(const std::string& path) {
  std::string out;
  size_t i = 0;
  while (i <= path.size()) {
    const size_t j = std::min(path.find('.', i), path.size());
    const std::string part = path.substr(i, j - i);
    const bool number =
        !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!out.empty()) out += '.';
    out += number ? "*" : part;
    i = j + 1;
  }
  return out;
}

std::string describe_site(const AllocSite& s, bool pattern) {
  std::string where = s.module ? (pattern ? module_pattern(*s.module) : *s.module) : "";
  if (s.op) {
    if (!where.empty()) where += ' ';
    where += s.op;
    if (s.backward)
      where += " backward";
    else if (s.recompute)
      where += " (recomputed)";
  }
  return where.empty() ? "(outside any module or op)" : where;
}

class Ledger final : public MetaObserver {
 public:
  void on_allocate(uintptr_t address, size_t bytes, MemCategory category,
                   const MetaTensorDesc* desc) override {
    const AllocSite& site = alloc_site();
    std::string label = describe_site(site, true);
    if (desc) {  // appended piece by piece (GCC 12 warns, falsely, of overlapping copies in a + chain)
      label += ' ';
      label += desc->shape.to_string();
      label += ' ';
      label += dtype_name(desc->dtype);
    }
    label += '\x1f';  // the key also holds the category (one name may be in two: an arena)
    label += static_cast<char>('0' + static_cast<int>(category));
    auto [it, fresh] = label_ids_.try_emplace(label, static_cast<int32_t>(labels_.size()));
    if (fresh) labels_.push_back({label.substr(0, label.size() - 2), category});
    events_.push_back({address, it->second, static_cast<int64_t>(bytes), true});
    live_ += static_cast<int64_t>(bytes);
    if (live_ > peak_) {
      peak_ = live_;
      peak_event_ = events_.size();
      peak_site_ = site;
      peak_module_ = site.module ? *site.module : std::string();
    }
  }
  void on_free(uintptr_t address, size_t bytes, MemCategory) override {
    events_.push_back({address, -1, static_cast<int64_t>(bytes), false});
    live_ -= static_cast<int64_t>(bytes);
  }

  // What was alive right after the allocation that made the highest total, by label.
  std::vector<MemoryTerm> terms_at_peak() const {
    std::unordered_map<uintptr_t, int32_t> alive;  // address -> label
    for (size_t i = 0; i < peak_event_; ++i) {
      const Event& e = events_[i];
      if (e.alloc)
        alive[e.address] = e.label;
      else
        alive.erase(e.address);  // a block from before the ledger started is simply not there
    }
    std::unordered_map<int32_t, MemoryTerm> by_label;
    for (size_t i = 0; i < peak_event_; ++i) {
      const Event& e = events_[i];
      if (!e.alloc) continue;
      auto it = alive.find(e.address);
      if (it == alive.end() || it->second != e.label) continue;
      MemoryTerm& t = by_label[e.label];
      t.name = labels_[static_cast<size_t>(e.label)].name;
      t.category = labels_[static_cast<size_t>(e.label)].category;
      ++t.count;
      t.bytes += e.bytes;
      alive.erase(it);  // counted once
    }
    std::vector<MemoryTerm> terms;
    for (auto& [id, t] : by_label) terms.push_back(std::move(t));
    std::sort(terms.begin(), terms.end(), [](const MemoryTerm& a, const MemoryTerm& b) {
      return a.bytes != b.bytes ? a.bytes > b.bytes : a.name < b.name;
    });
    return terms;
  }

  std::string peak_moment() const {
    if (peak_event_ == 0) return "nothing allocated";
    AllocSite s = peak_site_;
    s.module = peak_module_.empty() ? nullptr : &peak_module_;
    std::string m;
    if (s.phase) {
      m = s.step > 0 ? "step " + std::to_string(s.step) + " " : "";
      m += (s.backward || s.recompute) && std::string(s.phase) == "forward" ? "backward" : s.phase;
    } else {
      m = "set-up";
    }
    return m + ", " + describe_site(s, false);
  }

 private:
  struct Event {
    uintptr_t address;
    int32_t label;  // -1 for a free
    int64_t bytes;
    bool alloc;
  };
  struct Label {
    std::string name;
    MemCategory category;
  };
  std::vector<Event> events_;
  std::vector<Label> labels_;
  std::unordered_map<std::string, int32_t> label_ids_;
  int64_t live_ = 0, peak_ = 0;
  size_t peak_event_ = 0;  // events [0, peak_event_) make the peak
  AllocSite peak_site_;
  std::string peak_module_;  // a copy: the module's own string may be gone when the report is made
};

std::mutex& prediction_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

MemoryPrediction predict_memory(const std::function<void()>& run) {
  const std::lock_guard<std::mutex> lock(prediction_mutex());
  const DeviceScope meta(Device::meta());
  gemm_scratch_release();  // no meta GEMM buffers of an earlier prediction
  Ledger ledger;
  {
    const ScopedMetaObserver observe(&ledger);
    MemoryTracker::meta().reset_peaks();
    run();
    gemm_scratch_release();  // within the observed run, so the ledger sees every block go
  }
  const MemorySnapshot snap = MemoryTracker::meta().snapshot();
  MemoryPrediction p;
  p.peak_bytes = snap.peak_total;
  p.peak_by_category = snap.peak;
  p.peak_moment = ledger.peak_moment();
  p.terms = ledger.terms_at_peak();
  for (const MemoryTerm& t : p.terms) p.at_peak[static_cast<size_t>(t.category)] += t.bytes;
  p.notes.push_back(
      "oneDNN's own allocations outside the GEMM scratchpad (primitive descriptors, its "
      "thread pool) and the allocator's cache of freed blocks are not tensor memory and "
      "are not counted (process peak RSS shows them)");
  return p;
}

}  // namespace mixtrain
