// Where the program was when it crashed. On a fatal signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE, or
// SIGABRT: glibc aborts on a corrupted heap, "corrupted size vs. prev_size") the handler writes
// one line naming the signal and one with the return addresses as offsets into the executable,
// ready for `addr2line -e mixtrain -f -C -i OFFSETS` on the same build (the build is
// reproducible: a crash seen once in a CI log can then be found from the log alone), and dies of
// the same signal, so the exit code is the crash's (134, 139). Not in sanitizer builds, whose own
// reports say more. Inside the handler only async-signal-safe calls: write(2) and backtrace(),
// whose unwinder is loaded up front (its first call may allocate, and the heap may be the thing
// that is broken); no stdio, no malloc.
#include <execinfo.h>
#include <link.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstring>

#include "commands.h"

namespace mixtrain::cli {

// Sanitizer builds keep the sanitizer's own handler (its reports have symbols), so none of the
// handler below is compiled there: an unused static function is an error under -Werror.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MIXTRAIN_OWN_CRASH_HANDLER 0
#else
#define MIXTRAIN_OWN_CRASH_HANDLER 1
#endif

#if MIXTRAIN_OWN_CRASH_HANDLER
namespace {

uintptr_t g_exe_begin = 0, g_exe_end = 0;  // the executable's mapped range
std::atomic<bool> g_reported{false};

int find_executable(dl_phdr_info* info, size_t, void*) {
  // The first object dl_iterate_phdr reports is the executable (its name is empty).
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& p = info->dlpi_phdr[i];
    if (p.p_type != PT_LOAD) continue;
    lo = std::min<uintptr_t>(lo, info->dlpi_addr + p.p_vaddr);
    hi = std::max<uintptr_t>(hi, info->dlpi_addr + p.p_vaddr + p.p_memsz);
  }
  g_exe_begin = info->dlpi_addr;  // offsets are from the load base, as addr2line reads them
  g_exe_end = hi > lo ? hi : 0;
  return 1;  // stop after the first
}

void put(const char* s) {
  for (size_t n = std::strlen(s); n > 0;) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

void put_hex(uintptr_t v) {
  char b[2 + 2 * sizeof v + 1];
  char* e = b + sizeof b;
  *--e = '\0';
  do {
    *--e = "0123456789abcdef"[v & 15];
    v >>= 4;
  } while (v != 0);
  *--e = 'x';
  *--e = '0';
  put(e);
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV (invalid memory access)";
    case SIGBUS:
      return "SIGBUS (bus error)";
    case SIGILL:
      return "SIGILL (illegal instruction)";
    case SIGFPE:
      return "SIGFPE (arithmetic exception)";
    case SIGABRT:
      return "SIGABRT (aborted)";
    default:
      return "a fatal signal";
  }
}

extern "C" void on_fatal_signal(int sig) {
  // One report, from the first thread that gets here; the others die with the process.
  if (!g_reported.exchange(true)) {
    void* frames[64];
    const int n = ::backtrace(frames, 64);
    put("mixtrain: fatal: ");
    put(signal_name(sig));
    put("; backtrace, offsets into the executable (addr2line -e mixtrain -f -C -i):");
    for (int i = 0; i < n; ++i) {
      const auto a = reinterpret_cast<uintptr_t>(frames[i]);
      put(" ");
      if (a >= g_exe_begin && a < g_exe_end) {
        put_hex(a - g_exe_begin - (i > 0 ? 1 : 0));  // a return address: the call is one byte before
      } else {
        put("?");  // in a shared library
      }
    }
    put("\n");
  }
  // SA_RESETHAND restored the default action: dying of the same signal keeps its exit status.
  std::raise(sig);
}

}  // namespace
#endif  // MIXTRAIN_OWN_CRASH_HANDLER

void install_crash_report() {
#if !MIXTRAIN_OWN_CRASH_HANDLER
  return;  // the sanitizer's handler reports crashes, with symbols
#else
  dl_iterate_phdr(find_executable, nullptr);
  void* warm[1];
  (void)::backtrace(warm, 1);  // loads the unwinder now, not in the handler
  struct sigaction sa {};
  sa.sa_handler = on_fatal_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND | SA_NODEFER;
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) sigaction(sig, &sa, nullptr);
#endif
}

}  // namespace mixtrain::cli
