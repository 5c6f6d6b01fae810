// The installed numerics probe (autograd/probe_hook.h).
#include "autograd/probe_hook.h"

namespace mixtrain::autograd::detail {
std::atomic<ProbeHook*> g_probe_hook{nullptr};
}
