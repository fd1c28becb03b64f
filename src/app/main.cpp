// xdit: command-line front end.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <map>
#include <string>

#include "app/commands.h"
#include "core/error.h"
#include "core/log.h"

int main(int argc, char** argv) {
  CLI::App app{"xdit: Diffusion Transformer inference (PixArt) on CPU, serial or parallel"};
  app.require_subcommand(1);
  // As with argparse (diffusers / xDiT scripts), a repeated option keeps its last value.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.set_version_flag("--version", std::string("xdit ") + XDIT_VERSION);
  std::map<CLI::App*, std::function<int()>> runners;
  auto add = [&](std::function<int()> run) {
    runners[app.get_subcommands({}).back()] = std::move(run);
  };
  add(xdit::app::add_generate(app));
  add(xdit::app::add_bench(app));
  add(xdit::app::add_info(app));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "xdit: error: %s (see xdit --help)\n", e.what());
    return 2;
  }
  try {
    for (auto& [sub, run] : runners)
      if (sub->parsed()) return run();
  } catch (const xdit::Error& e) {
    std::fprintf(stderr, "xdit: error: %s\n", e.what());
    XDIT_DEBUG("(raised at ", e.where(), ")");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xdit: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
