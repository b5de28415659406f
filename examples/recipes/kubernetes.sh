#!/usr/bin/env bash
# Kubernetes: a coordination.k8s.io/v1 Lease taken with kubectl, whose fencing token is
# spec.leaseTransitions, raised by one in the same update that names the new holder (a
# `kubectl replace` conditional on the Lease's resourceVersion, so two candidates cannot both
# take it with the same count), and the zombie it fences out:
#   A takes the Lease and token, writes; A stalls past leaseDurationSeconds without renewing;
#   B takes the expired Lease over, gets a larger token, writes; A wakes up and writes with its
#   old token: fencegate answers 409 StaleFencingToken, and the object keeps B's data.
# Needs kubectl configured for a cluster (rights on leases in NAMESPACE). Not yet run against a
# real API server (none runs in the test suite): try it on yours first. Starts nothing. Exit 0
# only if the zombie was refused.
#
# Environment (defaults in brackets):
#   NAMESPACE  the Lease's namespace               [default]
#   LEASE      the Lease's name                    [fencegate-demo]
#   FENCEGATE  fencegate host:port                 [127.0.0.1:8080]
#   BUCKET     object-scoped bucket                [default]
#   KEY        the object the Lease guards         [k8s-demo.txt]
#   TTL        leaseDurationSeconds                [2]
set -euo pipefail
NAMESPACE="${NAMESPACE:-default}"
LEASE="${LEASE:-fencegate-demo}"
KEY="${KEY:-k8s-demo.txt}"
TTL="${TTL:-2}"
. "$(dirname "$0")/fencegate.sh"

# The Lease on stdin taken over by WHO (argv 1), if it is free or expired: prints the updated
# Lease, or nothing while another holder's is current. Every acquisition raises leaseTransitions.
TAKE='
import json, sys, datetime
lease, who, ttl = json.load(sys.stdin), sys.argv[1], int(sys.argv[2])
spec, now = lease.setdefault("spec", {}), datetime.datetime.now(datetime.timezone.utc)
renewed = spec.get("renewTime")
if spec.get("holderIdentity") and renewed:
    until = datetime.datetime.fromisoformat(renewed.replace("Z", "+00:00"))
    if now < until + datetime.timedelta(seconds=spec.get("leaseDurationSeconds", 0)):
        sys.exit(0)
stamp = now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
if "resourceVersion" in lease.get("metadata", {}):
    spec["leaseTransitions"] = spec.get("leaseTransitions", 0) + 1
else:
    spec["leaseTransitions"] = 0
spec.update(holderIdentity=who, leaseDurationSeconds=ttl, acquireTime=stamp, renewTime=stamp)
print(json.dumps(lease))
'
# take WHO: prints the token (the new leaseTransitions), or nothing while the Lease is held.
take() {
    local lease new
    if lease="$(kubectl get lease "$LEASE" -n "$NAMESPACE" -o json 2>/dev/null)"; then
        new="$(python3 -c "$TAKE" "$1" "$TTL" <<<"$lease")"
        [[ -n "$new" ]] && kubectl replace -f - <<<"$new" >/dev/null 2>&1 || return 0
    else
        new="$(python3 -c "$TAKE" "$1" "$TTL" <<<"{\"apiVersion\": \"coordination.k8s.io/v1\",
            \"kind\": \"Lease\", \"metadata\": {\"name\": \"$LEASE\", \"namespace\": \"$NAMESPACE\"}}")"
        kubectl create -f - <<<"$new" >/dev/null 2>&1 || return 0
    fi
    python3 -c 'import json, sys; print(json.load(sys.stdin)["spec"]["leaseTransitions"])' <<<"$new"
}

kubectl get leases -n "$NAMESPACE" >/dev/null || fail "kubectl cannot list leases in $NAMESPACE"
TOKEN_A="$(take A)"
[[ -n "$TOKEN_A" ]] || fail "the Lease $NAMESPACE/$LEASE is held: $(kubectl get lease "$LEASE" -n "$NAMESPACE" -o jsonpath='{.spec.holderIdentity}')"
echo "A holds Lease $NAMESPACE/$LEASE with token $TOKEN_A (leaseTransitions)"
A1="$(write A "$TOKEN_A")"; echo "A writes -> $A1"; expect_written "$A1"

echo "A stalls past its ${TTL} s lease without renewing"
for ((i = 0; i < TTL * 10 + 100; i++)); do    # B waits for the Lease to expire
    TOKEN_B="$(take B)"; [[ -z "$TOKEN_B" ]] || break; sleep 0.1
done
[[ -n "$TOKEN_B" ]] || fail "B did not take the Lease over"
echo "B holds Lease $NAMESPACE/$LEASE with token $TOKEN_B"
B1="$(write B "$TOKEN_B")"; echo "B writes -> $B1"; expect_written "$B1"

A2="$(write A "$TOKEN_A")"; echo "A wakes up, writes with token $TOKEN_A -> $A2"
kubectl patch lease "$LEASE" -n "$NAMESPACE" --type=merge -p '{"spec": {"holderIdentity": null}}' >/dev/null    # B releases
expect_zombie_refused "$A2" "$TOKEN_B"
