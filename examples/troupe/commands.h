#pragma once
// The `troupe` command's subcommands. Each adds itself to the parent app and returns what runs it
// once parsing has chosen it; run() returns the process exit code.
//
//   CLI::App app{"troupe"};
//   std::vector<Command> commands = {add_info_command(app), add_op_command(app)};
//   app.parse(argc, argv);   // then run the command whose app was parsed
#include <CLI/CLI.hpp>
#include <functional>

namespace troupe::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command add_info_command(CLI::App& parent);  // troupe info [--json]
Command add_op_command(CLI::App& parent);    // troupe op NAME [--attr K=V]... IN.npy... --out OUT.npy
Command add_launch_command(CLI::App& parent);  // troupe launch --nproc N [...] -- PROGRAM ARGS...
Command add_serve_command(CLI::App& parent);   // troupe serve --load LIBRARY.so...
Command add_trace_command(CLI::App& parent);   // troupe trace merge DIR -o job.json
Command add_top_command(CLI::App& parent);     // troupe top --port P --ranks N | --endpoints host:port,...
Command add_secret_command(CLI::App& parent);  // troupe secret FILE

// Usage errors found after parsing (exit code 2, like CLI11's own).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace troupe::cli
