#include "net/errors.h"

#include "devices/error_kinds.h"

namespace troupe {

namespace {

ErrorKindRegistrar<CommError> comm_error_kind;
ErrorKindRegistrar<PeerLostError> peer_lost_error_kind;

}  // namespace

}  // namespace troupe
