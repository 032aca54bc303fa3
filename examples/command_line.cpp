// CLI11, compiled once for every example (command_line.h says why).
#include "examples/command_line.h"

#include <CLI/CLI.hpp>
#include <deque>

namespace troupe::cli {

struct App::State {
  CLI::App app;
  std::deque<Option> options;  // stable addresses: add_option hands out pointers
};

Option* Option::check(const Validator& v) {
  switch (v.kind) {
    case Validator::positive: option_->check(CLI::PositiveNumber); break;
    case Validator::non_negative: option_->check(CLI::NonNegativeNumber); break;
    case Validator::range: option_->check(CLI::Range(v.low, v.high)); break;
    case Validator::member: option_->check(CLI::IsMember(v.members)); break;
  }
  return this;
}

Option* Option::capture_default_str() {
  option_->capture_default_str();
  return this;
}

Option* Option::required() {
  option_->required();
  return this;
}

Option* Option::delimiter(char c) {
  option_->delimiter(c);
  return this;
}

App::App(const std::string& description) : state_(new State{CLI::App{description}, {}}) {}
App::~App() = default;

Option* App::keep(CLI::Option* option) { return &state_->options.emplace_back(Option(option)); }

#define TROUPE_ADD_OPTION(T)                                                         \
  Option* App::add_option(const std::string& name, T& value, const std::string& help) { \
    return keep(state_->app.add_option(name, value, help));                          \
  }
TROUPE_ADD_OPTION(int)
TROUPE_ADD_OPTION(unsigned)
TROUPE_ADD_OPTION(int64_t)
TROUPE_ADD_OPTION(uint64_t)
TROUPE_ADD_OPTION(double)
TROUPE_ADD_OPTION(float)
TROUPE_ADD_OPTION(std::string)
TROUPE_ADD_OPTION(std::vector<int>)
TROUPE_ADD_OPTION(std::vector<int64_t>)
TROUPE_ADD_OPTION(std::vector<double>)
TROUPE_ADD_OPTION(std::vector<std::string>)
#undef TROUPE_ADD_OPTION

Option* App::add_flag(const std::string& name, bool& value, const std::string& help) {
  return keep(state_->app.add_flag(name, value, help));
}

int App::parse(int argc, const char* const* argv) {
  try {
    state_->app.parse(argc, argv);
    return -1;
  } catch (const CLI::ParseError& e) {
    return state_->app.exit(e);
  }
}

}  // namespace troupe::cli
