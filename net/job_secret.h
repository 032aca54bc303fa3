#pragma once
// The job secret: 32 random bytes shared by the ranks of one job and by nothing else. Holding it is
// what it takes to join: every connection of the job proves it (net/handshake.h, ZeroMQ's CURVE),
// and every key the job uses is derived from it (libsodium's KDF), one per purpose, so one file is
// all a user hands out.
//
//   JobSecret secret = generate_job_secret();
//   write_job_secret_file("/run/job/troupe.secret", secret);     // mode 0600; `troupe secret FILE`
//   JobKeys keys = derive_job_keys(load_job_secret_file(path));   // on each rank
//
// `troupe launch` makes one per job in its run directory and hands it to its ranks through
// TROUPE_JOB_SECRET_FILE; ranks started otherwise (mpirun, srun, Kubernetes, by hand) read the file
// that variable names. The file holds the secret as 64 hex digits on one line, so
// `openssl rand -hex 32 > FILE` makes one too.
#include <array>
#include <cstdint>
#include <string>

namespace troupe::net {

inline constexpr size_t kJobSecretBytes = 32;

struct JobSecret {
  std::array<uint8_t, kJobSecretBytes> bytes{};
};

// ZeroMQ CURVE key pair, Z85-encoded (40 characters each).
struct CurveKeys {
  std::string public_key;
  std::string secret_key;
};

// The keys a job derives from its secret.
struct JobKeys {
  CurveKeys curve;                       // every rank's ROUTER and DEALERs (one pair per job)
  std::array<uint8_t, 32> handshake{};   // the MAC key of connection handshakes
  std::array<uint8_t, 16> job_id{};      // names the job in handshakes; reveals nothing of the secret
};

JobSecret generate_job_secret();  // from libsodium's randombytes
// CommError when the file is missing, readable by group or others, or not 64 hex digits.
JobSecret load_job_secret_file(const std::string& path);
// Creates path with mode 0600 (CommError if it cannot).
void write_job_secret_file(const std::string& path, const JobSecret& secret);
JobKeys derive_job_keys(const JobSecret& secret);

// The error a multi-rank job without a secret gets: how to make and hand one, and the opt-out.
std::string missing_job_secret_message();

}  // namespace troupe::net
