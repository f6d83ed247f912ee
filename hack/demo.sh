#!/usr/bin/env bash
# `make demo`: show Tusk on a real Kubernetes. Uses the cluster in KUBECONFIG
# (the local cluster's kubeconfig when KUBECONFIG is unset and it exists) and
# brings up the local cluster when none is reachable; builds and loads the
# images, deploys the operator, applies the sample PostgresCluster, waits
# until it is Ready and shows how to connect. Running it twice is fine.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/lib.sh
. "$here/lib.sh"
root=$(repo_root)
cd "$root"

DEMO_WAIT=${DEMO_WAIT:-300}
SAMPLE=example

reachable() { kubectl get --raw /readyz >/dev/null 2>&1; }

ensure_cluster() {
  if [ -z "${KUBECONFIG:-}" ] && [ -f "$LOCAL_CLUSTER_KUBECONFIG" ]; then
    export KUBECONFIG=$LOCAL_CLUSTER_KUBECONFIG
  fi
  if reachable; then
    log "Using the cluster in ${KUBECONFIG:-~/.kube/config} ($(kubectl config current-context))."
    return
  fi
  log "No cluster is reachable through ${KUBECONFIG:-~/.kube/config}; starting the local cluster."
  "$here/local-cluster" up
  export KUBECONFIG=$LOCAL_CLUSTER_KUBECONFIG
  reachable || die "the local cluster came up but its API server does not answer: see 'make cluster-status'."
}

# condition prints "STATUS REASON: MESSAGE" of the sample's Ready condition.
condition() {
  kubectl get pgc "$SAMPLE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].reason}: {.status.conditions[?(@.type=="Ready")].message}' 2>/dev/null
}

# wait_ready shows each change of the Ready condition until it is True or
# DEMO_WAIT seconds have passed. Prints the final condition.
wait_ready() {
  local deadline=$((SECONDS + DEMO_WAIT)) last="" now
  while [ $SECONDS -lt $deadline ]; do
    now=$(condition || true)
    [[ $now != " "* ]] || now="" # no Ready condition yet
    [ "$now" = "$last" ] || log "  $SAMPLE Ready: ${now:-<no status yet>}" >&2
    last=$now
    [[ $now != "True "* ]] || break
    sleep 1
  done
  echo "$last"
}

how_to_connect() {
  cat <<EOF
PostgresCluster/$SAMPLE is Ready. Connect over TLS, verifying the server:

  kubectl get secret $SAMPLE-app -o jsonpath='{.data.ca\\.crt}' | base64 -d > $SAMPLE-ca.crt
  kubectl port-forward svc/$SAMPLE-rw 5432:5432 &
  PGPASSWORD=\$(kubectl get secret $SAMPLE-app -o jsonpath='{.data.password}' | base64 -d) \\
    psql "host=localhost port=5432 user=app dbname=app sslmode=verify-full sslrootcert=$SAMPLE-ca.crt"

Applications in the cluster mount the Secret $SAMPLE-app (keys uri, jdbc-uri, host,
port, dbname, username, password, ca.crt) and connect to $SAMPLE-rw (writes)
or $SAMPLE-ro (reads from replicas).
EOF
}

main() {
  ensure_cluster
  timed "images" "$here/images.sh" images
  timed "deploy" make --no-print-directory deploy
  kubectl apply -k config/samples
  log "Waiting up to ${DEMO_WAIT}s for PostgresCluster/$SAMPLE to become Ready:"
  local final
  final=$(wait_ready)
  echo
  kubectl get pgc
  echo
  kubectl get pods -o wide
  echo
  case $final in
    "True "*) how_to_connect ;;
    *)
      kubectl describe pgc "$SAMPLE" | tail -20
      die "PostgresCluster/$SAMPLE is not Ready after ${DEMO_WAIT}s (last: '${final}'); see above and 'kubectl -n tusk-system logs deploy/tusk-operator'."
      ;;
  esac
}

main "$@"
