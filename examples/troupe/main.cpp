// The `troupe` command: `troupe info`, `op`, `launch`, `serve`, `trace merge`, `top` and `secret` (see commands.h). Errors go
// to stderr as "troupe <command>: <message>"; exit code 1 for failures, 2 for usage errors.
#include <iostream>

#include "examples/troupe/commands.h"

int main(int argc, char** argv) {
  using namespace troupe::cli;
  CLI::App app{"troupe: an actor-model dataflow runtime for tensors"};
  app.set_version_flag("--version", std::string("troupe ") + TROUPE_VERSION);
  app.require_subcommand(1);
  const std::vector<Command> commands = {add_info_command(app), add_op_command(app), add_launch_command(app),
                                         add_serve_command(app), add_trace_command(app), add_top_command(app),
                                         add_secret_command(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // help and version exit 0; CLI11 has printed the error
  }
  for (const Command& command : commands) {
    if (!command.app->parsed()) continue;
    const std::string prefix = "troupe " + command.app->get_name() + ": ";
    try {
      return command.run();
    } catch (const UsageError& e) {
      std::cerr << prefix << e.what() << "\n" << "Run with --help for more information.\n";
      return 2;
    } catch (const std::exception& e) {
      std::cerr << prefix << e.what() << "\n";
      return 1;
    }
  }
  return 2;  // unreachable: require_subcommand(1) made parsing fail otherwise
}
