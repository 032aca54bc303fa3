// `troupe secret FILE`: make a job secret (net/job_secret.h) for ranks that `troupe launch` does
// not start on one node alone: copy FILE to every node (or into a Kubernetes Secret) and point
// TROUPE_JOB_SECRET_FILE (or `troupe launch --secret`) at it.
//
//   troupe secret job.secret            # 64 hex digits, mode 0600; refuses to overwrite
#include <filesystem>
#include <iostream>
#include <memory>

#include "examples/troupe/commands.h"
#include "net/job_secret.h"

namespace troupe::cli {

Command add_secret_command(CLI::App& parent) {
  CLI::App* app = parent.add_subcommand("secret", "Make a job secret file (mode 0600) for TROUPE_JOB_SECRET_FILE");
  auto path = std::make_shared<std::string>();
  app->add_option("file", *path, "Where to write it (must not exist)")->required();
  return {app, [path] {
            if (std::filesystem::exists(*path))
              throw UsageError(*path + " exists: a job's ranks must share one secret, so it is not replaced");
            net::write_job_secret_file(*path, net::generate_job_secret());
            std::cout << "wrote a job secret to " << *path
                      << ": give every rank the same file, as TROUPE_JOB_SECRET_FILE or `troupe launch --secret`\n";
            return 0;
          }};
}

}  // namespace troupe::cli
