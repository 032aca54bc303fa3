#pragma once
// The ZAP handler of a job with a secret (job_secret.h): the transport's ROUTER serves CURVE, and ZeroMQ asks
// this handler about every client that completed the handshake; it admits only clients holding the
// job's key pair. Internal to net/.
//
//   void* zap = bind_zap_handler(context);  // before any CURVE server binds, or all are admitted
//   answer_zap_requests(zap, keys);          // whenever zap is readable (the transport's I/O thread)
#include "net/job_secret.h"

namespace troupe::net {

// A REP socket bound where ZeroMQ looks for the context's ZAP handler. CommError when it cannot bind.
void* bind_zap_handler(void* context);
// Answers the requests waiting on zap without blocking: 200 for the job's public key, 400 otherwise.
void answer_zap_requests(void* zap, const CurveKeys& keys);

}  // namespace troupe::net
