// The installed cast hook (autograd/cast_hook.h): one pointer for the process, read by every op.
#include "autograd/cast_hook.h"

#include <atomic>

namespace mixtrain::autograd {
namespace {
std::atomic<const CastHook*> g_hook{nullptr};
}  // namespace

void set_cast_hook(const CastHook* hook) { g_hook.store(hook, std::memory_order_release); }
const CastHook* cast_hook() { return g_hook.load(std::memory_order_acquire); }

}  // namespace mixtrain::autograd
