// An actor type in a shared library, for ranks that run `troupe serve --load` (tests/net/remote_test.cpp).
#include <cstdlib>

#include "net/remote/actor_type.h"

namespace {

struct Plugin {
  std::string where() const { return "plugin@" + std::string(std::getenv("RANK")); }
};

}  // namespace

TROUPE_ACTOR(Plugin, "test.plugin", &Plugin::where);
