#pragma once
// CURVE keys of a job. One key pair per job, shared by its ranks: every ROUTER serves CURVE with
// the secret key and admits only clients that prove they hold the same pair (a ZAP check), so
// "has the key file" is what it takes to join, and nothing else can connect, read or inject.
//
//   CurveKeys keys = generate_curve_keys();
//   write_curve_key_file("/run/job/troupe.key", keys);   // mode 0600; copy it to every node
//   CurveKeys k = load_curve_key_file("/run/job/troupe.key");  // on each rank
//
// The key file holds the 40-character Z85 secret key on one line (the public key is derived).
// `troupe launch --curve` writes one for a single-node job and points the ranks at it;
// `--curve-key FILE` uses (or creates) FILE, for jobs spanning nodes.
#include <string>

namespace troupe::net {

struct CurveKeys {
  std::string public_key;  // Z85, 40 characters
  std::string secret_key;  // Z85, 40 characters
};

CurveKeys generate_curve_keys();
// CommError when the file is missing, unreadable by group/others-safe mode, or not a Z85 key.
CurveKeys load_curve_key_file(const std::string& path);
// Creates path with mode 0600 (CommError if it cannot).
void write_curve_key_file(const std::string& path, const CurveKeys& keys);

}  // namespace troupe::net
