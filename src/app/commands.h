// The xdit subcommands. Each registers its options on the CLI11 app and runs
// when chosen; errors propagate as xdit::Error and are printed by main().
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace xdit::app {

// Registers the subcommand; the returned function runs it (returns the exit code).
std::function<int()> add_generate(CLI::App& app);
std::function<int()> add_serve(CLI::App& app);
std::function<int()> add_bench(CLI::App& app);
std::function<int()> add_info(CLI::App& app);
std::function<int()> add_list_models(CLI::App& app);
std::function<int()> add_launch(CLI::App& app);
std::function<int()> add_tokenize(CLI::App& app);

// Shared by the subcommands.
// The built-in model: the tiny random-weight PixArt-α (its pictures are
// noise) until the demo model of issue 40 draws what it is asked.
// The demo model (issue 40; tools/demo_model/) and a caption of its grammar.
inline constexpr const char* kDefaultModel = "demo-shapes";
inline constexpr const char* kDefaultPrompt = "a large red circle on the left on a blue background";
std::string default_model_dir();
std::string seconds(double s);  // "0.41 s"

// Option checks shared by the subcommands: --threads from 1 to 4 x the cores
// (more crashes OpenMP's runtime), and a float that must be finite.
int max_threads();
CLI::Validator thread_count();
CLI::Validator finite_number();
// An integer of at least `lo` (`note` says what the bound means).
CLI::Validator at_least(int64_t lo, const std::string& note);

// xdit bench serve: a load benchmark of `xdit serve` on `model` (bench_serve.cpp).
// `ranks` > 1 starts it under mpirun; `serve_args` go to `xdit serve` (the
// parallel flags).
int run_bench_serve(const std::string& model, int requests, int clients, int threads, int ranks,
                    const std::vector<std::string>& serve_args);

}  // namespace xdit::app
