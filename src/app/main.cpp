// xdit: command-line front end.
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <map>
#include <new>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "app/commands.h"
#include "app/startup.h"
#include "comm/communicator.h"
#include "core/error.h"
#include "core/log.h"

namespace {

// One line for an exception that escaped the checks.
std::string describe_exception(std::exception_ptr p) {
  try {
    std::rethrow_exception(p);
  } catch (const std::bad_alloc&) {
    return "out of memory: a buffer could not be allocated (the request needs more memory than "
           "this machine has left; use a smaller size, fewer prompts or --dtype bf16)";
  } catch (const std::length_error& e) {
    return std::string("a size is too large to allocate (") + e.what() +
           "): use a smaller size or fewer prompts";
  } catch (const std::filesystem::filesystem_error& e) {
    std::string s = "cannot access " + e.path1().string() + ": " + e.code().message();
    if (!e.path2().empty()) s += " (and " + e.path2().string() + ")";
    return s;
  } catch (const nlohmann::json::exception& e) {
    return std::string("malformed JSON value: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("internal error (please report it): ") + e.what();
  } catch (...) {
    return "internal error (please report it): unknown exception";
  }
}

// `text` on one line, for an error line that echoes values a user gave (a
// --model path with a newline): control characters as \n, \r, \t or \xNN.
std::string one_line(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c != 0x7f) {
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  // A fixed mmap threshold: glibc raises its threshold each time a mapped
  // block is freed (up to 32 MiB), after which blocks of 1–32 MiB come from
  // the heap, and loading a model's weights one after another leaves them
  // there as fragments. Full-size PixArt-α (xdit bench transformer): 2.87 or
  // 3.11 GB resident after loading, depending on the link's allocation
  // order, against 2.69 GB with the threshold fixed at 1 MiB. Blocks of
  // 32 MiB and more are reused by core/buffer_pool either way. A user's
  // MALLOC_MMAP_THRESHOLD_ still wins.
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") == nullptr) ::mallopt(M_MMAP_THRESHOLD, 1 << 20);
  // Under mpirun every rank runs this; MPI starts before anything else.
  std::unique_ptr<xdit::comm::Communicator> world;
  try {
    world = xdit::comm::init_world(&argc, &argv);
  } catch (const xdit::Error& e) {
    std::fprintf(stderr, "xdit: error: %s\n", one_line(e.what()).c_str());
    return 1;
  }
  xdit::set_log_rank(world->rank(), world->size());
  xdit::app::set_world(world.get());
  CLI::App app{
      "xdit: diffusion transformer inference (PixArt-α/Σ, FLUX.1, SD3/3.5, Wan2.1/2.2, "
      "Z-Image, Qwen-Image) on CPU or CUDA, serial or parallel"};
  app.require_subcommand(1);
  // As with argparse (diffusers / xDiT scripts), a repeated option keeps its last value.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.set_version_flag("--version", std::string("xdit ") + XDIT_VERSION);
  std::map<CLI::App*, std::function<int()>> runners;
  auto add = [&](std::function<int()> run) {
    runners[app.get_subcommands({}).back()] = std::move(run);
  };
  add(xdit::app::add_generate(app));
  add(xdit::app::add_serve(app));
  add(xdit::app::add_bench(app));
  add(xdit::app::add_info(app));
  add(xdit::app::add_list_models(app));
  add(xdit::app::add_launch(app));
  add(xdit::app::add_tokenize(app));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "xdit: error: %s%s (see xdit --help)\n", xdit::rank_prefix().c_str(),
                 one_line(e.what()).c_str());
    return 2;
  }
  // One rank's error ends every rank: print it, then abort the whole job
  // (mpirun stops the others), so nothing waits forever in a collective.
  auto fail = [&](const char* what) {
    std::fprintf(stderr, "xdit: error: %s%s\n", xdit::rank_prefix().c_str(),
                 one_line(what).c_str());
    std::fflush(stderr);
    if (world->size() > 1) world->abort(1);
    return 1;
  };
  int rc = 0;
  try {
    xdit::app::check_thread_environment();  // before any parallel region starts the threads
    for (auto& [sub, run] : runners)
      if (sub->parsed()) rc = run();
  } catch (const xdit::Error& e) {
    XDIT_DEBUG("(raised at ", e.where(), ")");
    return fail(e.what());
  } catch (...) {
    // A library's exception that no check turned into a message: say what
    // it means, never only its what().
    return fail(describe_exception(std::current_exception()).c_str());
  }
  world.reset();
  xdit::comm::finalize();
  return rc;
}
