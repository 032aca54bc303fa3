// `troupe serve`: a rank that only hosts remote actors, for jobs whose driver is another program.
// The libraries' TROUPE_ACTOR registrations run as they load; it returns once every driver is done.
//
//   troupe launch --nproc 3 -- sh -c 'if [ $RANK = 0 ]; then exec ./driver;
//                                      else exec troupe serve --load ./libstages.so; fi'
#include <dlfcn.h>

#include <memory>

#include "devices/error.h"
#include "examples/troupe/commands.h"
#include "net/remote/remote_actor.h"

namespace troupe::cli {

Command add_serve_command(CLI::App& parent) {
  CLI::App* app = parent.add_subcommand("serve", "Host remote actors of the loaded libraries until the drivers are done");
  auto libraries = std::make_shared<std::vector<std::string>>();
  app->add_option("--load", *libraries, "A shared library that registers actor types (TROUPE_ACTOR); repeatable");
  return {app, [libraries] {
            for (const std::string& library : *libraries)
              if (!::dlopen(library.c_str(), RTLD_NOW | RTLD_GLOBAL))
                throw IOError("cannot load '" + library + "': " + ::dlerror());
            net::RemoteActors actors(net::init_process_group());
            net::serve();
            return 0;
          }};
}

}  // namespace troupe::cli
