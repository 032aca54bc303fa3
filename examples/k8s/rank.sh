#!/bin/sh
# One rank of the Kubernetes Indexed Job (dist_sgd_job.yaml): its rank is the pod's completion
# index; rank 0 serves the rendezvous on its own pod address (POD_IP, from the downward API) and
# resolves no name, the others find it as MASTER_ADDR, rank 0's name under the headless Service
# (retried while the Service has not published it yet: net/bootstrap/resolve.h). WORLD_SIZE and MASTER_PORT
# come from the manifest. Runs the command given.
#
#   rank.sh /troupe/build/bin/dist_sgd --epochs 1
set -eu
export RANK="${JOB_COMPLETION_INDEX:?not a pod of an Indexed Job}"
if [ "$RANK" = 0 ]; then
  export MASTER_ADDR="${POD_IP:?set POD_IP from status.podIP}"
fi
exec "$@"
