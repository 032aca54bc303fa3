#pragma once
// An environment variable set for a scope, then put back as it was (tests of env-driven defaults).
//
//   ScopedEnv ranks("LOCAL_WORLD_SIZE", "9");  // unset again, or restored, at the end of the scope
#include <cstdlib>
#include <optional>
#include <string>

struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(std::string n, const std::string& value) : name(std::move(n)) {
    if (const char* v = std::getenv(name.c_str())) old = v;
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old) ::setenv(name.c_str(), old->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
};
