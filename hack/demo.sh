#!/usr/bin/env bash
# `make demo`: show Tusk on a real Kubernetes. Uses the cluster in KUBECONFIG
# (the local cluster's kubeconfig when KUBECONFIG is unset and it exists) and
# brings up the local cluster when none is reachable; builds and loads the
# images, deploys the operator, applies the sample PostgresCluster and
# reports honestly what the operator did with it. Running it twice is fine.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/lib.sh
. "$here/lib.sh"
root=$(repo_root)
cd "$root"

DEMO_WAIT=${DEMO_WAIT:-60}
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

# condition prints "STATUS REASON OBSERVED/GENERATION" of the sample's Ready condition.
condition() {
  kubectl get pgc "$SAMPLE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].reason} {.status.observedGeneration}/{.metadata.generation}' 2>/dev/null
}

# wait_ready shows each change of the Ready condition until it is True, or
# until the operator has recorded the current generation and says it cannot
# go further. Prints the final condition.
wait_ready() {
  local deadline=$((SECONDS + DEMO_WAIT)) last="" now gens
  while [ $SECONDS -lt $deadline ]; do
    now=$(condition || true)
    [[ $now != " "* ]] || now="" # no Ready condition yet
    [ "$now" = "$last" ] || log "  $SAMPLE Ready: ${now:-<no status yet>}"
    last=$now
    case $now in
      "True "*) break ;;
      "Unknown LifecycleNotImplemented "*)
        gens=${now##* }
        [ "${gens%/*}" != "${gens#*/}" ] || break # the current generation is recorded
        ;;
    esac
    sleep 1
  done
  echo "$last"
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
    "True "*)
      echo "PostgresCluster/$SAMPLE is Ready. Connect with:"
      echo "  kubectl port-forward svc/$SAMPLE-rw 5432:5432 &  psql -h 127.0.0.1 -U app app"
      ;;
    "Unknown LifecycleNotImplemented "*)
      echo "The operator is running and recorded PostgresCluster/$SAMPLE (Ready=Unknown, reason"
      echo "LifecycleNotImplemented), but this build does not create PostgreSQL instances yet"
      echo "(README, 'Status': instance manager and instance creation are the next issues)."
      echo "So there are no PostgreSQL pods and nothing to connect to yet. When instances exist:"
      echo "  kubectl port-forward svc/$SAMPLE-rw 5432:5432 &  psql -h 127.0.0.1 -U app app"
      ;;
    *)
      die "the operator did not record PostgresCluster/$SAMPLE within ${DEMO_WAIT}s (last: '${final}'): see 'kubectl -n tusk-system logs deploy/tusk-operator'."
      ;;
  esac
}

main "$@"
