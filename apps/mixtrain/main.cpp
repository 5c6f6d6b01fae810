// mixtrain's command-line program: parses the command line (CLI11) and runs one subcommand.
// Every error is one line on stderr and exit code 2; --help works everywhere.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>

#include "commands.h"
#include "mixtrain/core/error.h"
#include "mixtrain/dist/communicator.h"

namespace {

// OpenMP's threads wait for the next parallel region by spinning (libgomp's default spins ~300k
// iterations, about 3 ms, before sleeping). When another process holds one of the cores, a
// spinning thread holds a core the busy one needs, and every region waits for a thread that is
// not scheduled: a 2-thread gpt-nano run fell from ~8,000 to ~100 tokens/s. A passive wait
// (OMP_WAIT_POLICY=passive: sleep on a futex at once) fixes that but pays a wake-up per region,
// 3% of gpt-mini's and a third of gpt-nano's idle speed. A bounded spin, GOMP_SPINCOUNT=1000
// (~10 us, about one context switch), keeps both: measured side by side (bench/RESULTS.md,
// "OpenMP wait"), idle within 1.5% of the unbounded spin and, with a core busy, as fast as the
// passive wait. libgomp reads these once, when it is loaded (before main), so the program sets it
// and re-executes itself; a policy the user set (OMP_WAIT_POLICY or GOMP_SPINCOUNT, e.g.
// OMP_WAIT_POLICY=active on a dedicated machine) is kept.
constexpr const char* kSpinCount = "1000";

void prefer_bounded_openmp_wait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  if (setenv("GOMP_SPINCOUNT", kSpinCount, 1) != 0) return;
  execv("/proc/self/exe", argv);
  // Not re-executed (no /proc): run as is, with the runtime's default policy.
}

// An integer flag's value must fit 64 bits: CLI11 clamps 99999999999999999999 to INT64_MAX
// (`--steps` then ran "forever"). Added to every option CLI11 types as INT or UINT.
void refuse_integer_overflow(CLI::App& app) {
  for (CLI::Option* o : app.get_options()) {
    const std::string type = o->get_type_name();  // "INT", or "INT:<its validators>"
    const bool is_unsigned = type.rfind("UINT", 0) == 0;
    if (type.rfind("INT", 0) != 0 && !is_unsigned) continue;
    o->check(CLI::Validator(
        [is_unsigned](std::string& v) -> std::string {
          const char* b = v.data();
          const char* e = b + v.size();
          std::from_chars_result r;
          if (is_unsigned) {
            uint64_t x = 0;
            r = std::from_chars(b, e, x);
          } else {
            int64_t x = 0;
            r = std::from_chars(b, e, x);
          }
          if (r.ec == std::errc::result_out_of_range) return "value " + v + " does not fit in 64 bits";
          return "";
        },
        ""));
  }
  for (CLI::App* sub : app.get_subcommands({})) refuse_integer_overflow(*sub);
}

}  // namespace

int run_main(int argc, char** argv);

int main(int argc, char** argv) {
  // Under mpirun: MPI_Finalize on success, MPI_Abort on an error (the other ranks end too).
  return mixtrain::finish_world(run_main(argc, argv));
}

int run_main(int argc, char** argv) {
  using namespace mixtrain::cli;
  prefer_bounded_openmp_wait(argv);
  install_crash_report();
  CLI::App app{"mixtrain: mixed-precision training of transformer language models, in C++"};
  app.set_version_flag("--version", MIXTRAIN_VERSION);
  app.require_subcommand(1);
  app.fallthrough();  // global options (--threads) may follow the subcommand
  GlobalOptions global;
  app.add_option("--threads", global.threads, "Threads for every kernel (default: all cores)")
      ->check(CLI::Range(1, kMaxThreads));

  std::vector<Command> commands;
  register_info(app, global, commands);
  register_bench(app, global, commands);
  register_train(app, global, commands);
  register_compare(app, global, commands);
  register_sample(app, global, commands);
  register_memory(app, global, commands);
  register_report(app, global, commands);
  register_numerics(app, global, commands);
  register_finetune(app, global, commands);
  register_quantize(app, global, commands);
  register_tokenizer(app, global, commands);

  refuse_integer_overflow(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "mixtrain: error: %s (see mixtrain --help)\n", one_line(e.what()).c_str());
    return 2;
  }

  try {
    for (auto& c : commands)
      if (c.selected()) return c.run();
    std::fprintf(stderr, "mixtrain: error: no command given (see mixtrain --help)\n");
    return 2;
  } catch (const mixtrain::Error& e) {
    // The library names its options as the C++ API spells them; say the flags the user typed.
    std::fprintf(stderr, "mixtrain: error: %s\n", one_line(error_message(e, selected_command(app))).c_str());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "mixtrain: error: out of memory\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mixtrain: error: %s\n", one_line(e.what()).c_str());
    return 2;
  }
}
