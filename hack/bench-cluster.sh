#!/usr/bin/env bash
# `make bench-cluster`: the cluster lifecycle's figures, on the cluster in
# KUBECONFIG (the local cluster's when KUBECONFIG is unset), with the
# operator deployed and the images loaded (make images deploy):
#
#  1. a 3-instance PostgresCluster from `kubectl apply` to Ready;
#  2. adding a replica to a cluster holding BENCH_SCALE pgbench scale units
#     of data (68 ≈ 1 GiB), next to a plain pg_basebackup of the same data
#     over the same TLS connection, run in a pod on the same node.
#
# It prints the figures; docs/benchmarks.md records them with the machine.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/lib.sh
. "$here/lib.sh"
cd "$(repo_root)"

BENCH_SCALE=${BENCH_SCALE:-68}
BENCH_IMAGE=${BENCH_IMAGE:-tusk/postgres:15}
if [ -z "${KUBECONFIG:-}" ] && [ -f "$LOCAL_CLUSTER_KUBECONFIG" ]; then
  export KUBECONFIG=$LOCAL_CLUSTER_KUBECONFIG
fi
ns=tusk-bench-$(date +%s)
kubectl create namespace "$ns" >/dev/null
trap 'kubectl delete namespace "$ns" --wait=false >/dev/null' EXIT

cluster() { # name instances size
  kubectl -n "$ns" apply -f - >/dev/null <<EOF
apiVersion: tusk.dev/v1alpha1
kind: PostgresCluster
metadata: {name: $1}
spec:
  instances: $2
  image: $BENCH_IMAGE
  storage: {size: $3, reclaimPolicy: Delete}
EOF
}

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

wait_ready() { # name ready-instances
  until [ "$(kubectl -n "$ns" get pgc "$1" -o jsonpath='{.status.readyInstances}/{.status.conditions[?(@.type=="Ready")].status}')" = "$2/True" ]; do
    sleep 0.2
  done
}

secret() { kubectl -n "$ns" get secret "$1" -o jsonpath="{.data.$2}" | base64 -d; }

# superuser_sql runs SQL on the primary over its Unix socket.
superuser_sql() { # instance sql...
  local pod=$1
  shift
  kubectl -n "$ns" exec "$pod" -c postgres -- env PGPASSWORD="$(secret "${pod%-*}-superuser" password)" \
    psql -X -U postgres -d app -Atc "$*"
}

bench_create() {
  local start
  start=$(now)
  cluster create3 3 1Gi
  wait_ready create3 3
  echo "3-instance cluster from kubectl apply to Ready: $(since "$start") s"
  kubectl -n "$ns" delete pgc create3 --wait=true >/dev/null
}

# plain_basebackup copies the primary with pg_basebackup from a pod that
# mounts the replication certificate, and prints the seconds it took.
plain_basebackup() { # cluster
  kubectl -n "$ns" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: basebackup}
spec:
  restartPolicy: Never
  securityContext: {runAsNonRoot: true, fsGroup: 26, seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: main
      image: $BENCH_IMAGE
      imagePullPolicy: IfNotPresent
      securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
      command: [sh, -c]
      args:
        - install -m 0600 /tls/tls.key /tmp/tls.key &&
          start=\$(date +%s.%N) &&
          PGSSLMODE=verify-full PGSSLCERT=/tls/tls.crt PGSSLKEY=/tmp/tls.key PGSSLROOTCERT=/tls/ca.crt
          pg_basebackup -h $1-rw -U tusk_replication -D /backup/data -X stream -c fast &&
          end=\$(date +%s.%N) && awk -v a=\$start -v b=\$end 'BEGIN { printf "%.1f", b - a }'
      volumeMounts: [{name: tls, mountPath: /tls}, {name: backup, mountPath: /backup}]
  volumes:
    - {name: tls, secret: {secretName: $1-replication}}
    - {name: backup, emptyDir: {}}
EOF
  until [[ $(kubectl -n "$ns" get pod basebackup -o jsonpath='{.status.phase}') =~ Succeeded|Failed ]]; do sleep 0.5; done
  kubectl -n "$ns" logs basebackup
}

bench_add_replica() {
  cluster big 1 4Gi
  wait_ready big 1
  log "Loading pgbench scale $BENCH_SCALE into big-1"
  kubectl -n "$ns" exec big-1 -c postgres -- env PGPASSWORD="$(secret big-superuser password)" \
    pgbench -i -q -s "$BENCH_SCALE" -U postgres app >/dev/null 2>&1
  superuser_sql big-1 "CHECKPOINT" >/dev/null
  local size plain start added
  size=$(superuser_sql big-1 "SELECT pg_size_pretty(sum(pg_database_size(datname))) FROM pg_database")
  plain=$(plain_basebackup big)
  start=$(now)
  kubectl -n "$ns" scale pgc big --replicas=2 >/dev/null
  wait_ready big 2
  added=$(since "$start")
  echo "data: $size"
  echo "plain pg_basebackup over TLS: $plain s"
  echo "kubectl scale 1 -> 2 until the new replica is ready: $added s ($(awk -v a="$added" -v b="$plain" 'BEGIN { printf "%.2f", a / b }')x)"
}

bench_create
bench_add_replica
