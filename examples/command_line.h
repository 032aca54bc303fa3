#pragma once
// The examples' command lines: the few CLI11 calls they make, behind a header that does not include
// CLI11. CLI11 2.1 (Debian 12's) is header-only and costs ~15 s of compiler time in every file that
// includes it; here it is compiled once (command_line.cpp) for all the examples.
//
//   cli::App app{"gemm_bench: the packed GEMM against oneDNN"};
//   int reps = 20;
//   bool json = false;
//   app.add_option("--reps", reps, "timed runs")->check(cli::PositiveNumber)->capture_default_str();
//   app.add_flag("--json", json, "print one JSON line of figures");
//   TROUPE_PARSE_COMMAND_LINE(app, argc, argv);   // --help, or a usage error: returns its exit code
//
// The names and meanings are CLI11's (https://cliutils.github.io/CLI11/book/).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace CLI {
class Option;  // what troupe::cli::Option stands for
}

namespace troupe::cli {

// A check on an option's value.
struct Validator {
  enum Kind { positive, non_negative, range, member } kind;
  double low = 0, high = 0;          // range
  std::vector<std::string> members;  // member
};
inline const Validator PositiveNumber{Validator::positive, 0, 0, {}};
inline const Validator NonNegativeNumber{Validator::non_negative, 0, 0, {}};
inline Validator Range(double low, double high) { return {Validator::range, low, high, {}}; }
inline Validator IsMember(std::vector<std::string> members) { return {Validator::member, 0, 0, std::move(members)}; }

class App;

// One option of an App, as add_option returns it; each call returns it again for chaining.
class Option {
 public:
  Option* check(const Validator& v);
  Option* capture_default_str();  // --help shows the variable's value before parsing
  Option* required();
  Option* delimiter(char c);      // a list option also takes "1,2,3"

 private:
  friend class App;
  explicit Option(CLI::Option* option) : option_(option) {}
  CLI::Option* option_;
};

class App {
 public:
  explicit App(const std::string& description);
  ~App();
  App(const App&) = delete;
  App& operator=(const App&) = delete;

  Option* add_option(const std::string& name, int& value, const std::string& help = "");
  Option* add_option(const std::string& name, unsigned& value, const std::string& help = "");
  Option* add_option(const std::string& name, int64_t& value, const std::string& help = "");
  Option* add_option(const std::string& name, uint64_t& value, const std::string& help = "");
  Option* add_option(const std::string& name, double& value, const std::string& help = "");
  Option* add_option(const std::string& name, float& value, const std::string& help = "");
  Option* add_option(const std::string& name, std::string& value, const std::string& help = "");
  Option* add_option(const std::string& name, std::vector<int>& value, const std::string& help = "");
  Option* add_option(const std::string& name, std::vector<int64_t>& value, const std::string& help = "");
  Option* add_option(const std::string& name, std::vector<double>& value, const std::string& help = "");
  Option* add_option(const std::string& name, std::vector<std::string>& value, const std::string& help = "");
  Option* add_flag(const std::string& name, bool& value, const std::string& help = "");

  // -1 when the program goes on; else the exit code after --help or a usage error was printed.
  int parse(int argc, const char* const* argv);

 private:
  Option* keep(CLI::Option* option);
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace troupe::cli

// CLI11_PARSE's counterpart: returns from main with the exit code when the program should not go on.
#define TROUPE_PARSE_COMMAND_LINE(app, argc, argv)                         \
  do {                                                                     \
    if (const int command_line_exit = (app).parse((argc), (argv)); command_line_exit >= 0) \
      return command_line_exit;                                            \
  } while (false)
