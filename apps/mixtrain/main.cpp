// mixtrain's command-line program: parses the command line (CLI11) and runs one subcommand.
// Every error is one line on stderr and exit code 2; --help works everywhere.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <new>

#include "commands.h"
#include "mixtrain/core/error.h"

int main(int argc, char** argv) {
  using namespace mixtrain::cli;
  CLI::App app{"mixtrain: mixed-precision training of transformer language models, in C++"};
  app.set_version_flag("--version", MIXTRAIN_VERSION);
  app.require_subcommand(1);
  app.fallthrough();  // global options (--threads) may follow the subcommand
  GlobalOptions global;
  app.add_option("--threads", global.threads, "Threads for every kernel (default: all cores)")
      ->check(CLI::Range(1, 4096));

  std::vector<Command> commands;
  register_info(app, global, commands);
  register_bench(app, global, commands);
  register_train(app, global, commands);
  register_compare(app, global, commands);
  register_sample(app, global, commands);
  register_memory(app, global, commands);
  register_report(app, global, commands);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "mixtrain: error: %s (see mixtrain --help)\n", e.what());
    return 2;
  }

  try {
    for (auto& c : commands)
      if (c.selected()) return c.run();
    std::fprintf(stderr, "mixtrain: error: no command given (see mixtrain --help)\n");
    return 2;
  } catch (const mixtrain::Error& e) {
    // The library names its options as the C++ API spells them; say the flags the user typed.
    std::fprintf(stderr, "mixtrain: error: %s\n", error_message(e, selected_command(app)).c_str());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "mixtrain: error: out of memory\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mixtrain: error: %s\n", e.what());
    return 2;
  }
}
