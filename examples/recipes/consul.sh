#!/usr/bin/env bash
# Consul: a lock on a KV key held by a session, whose fencing token is the key's ModifyIndex
# right after the acquire (a Raft index: every later acquire has a larger one), and the zombie it
# fences out:
#   A takes the lock and token, writes; A stalls and its session is destroyed (as when its TTL
#   or health check fails), which releases the lock; B takes the lock, gets a larger token,
#   writes; A wakes up and writes with its old token: fencegate answers 409 StaleFencingToken,
#   and the object keeps B's data.
# Uses Consul's HTTP API (/v1/session, /v1/kv) with curl. Not yet run against a real Consul
# (Debian does not package one, so the test suite cannot start it): try it on yours first.
# Starts neither Consul nor fencegate. Exit 0 only if the zombie was refused.
#
# Environment (defaults in brackets):
#   CONSUL_HTTP_ADDR  Consul agent address, as for the consul CLI  [127.0.0.1:8500]
#   FENCEGATE         fencegate host:port                          [127.0.0.1:8080]
#   BUCKET            object-scoped bucket                         [default]
#   KEY               the object the lock guards                   [consul-demo.txt]
set -euo pipefail
CONSUL="${CONSUL_HTTP_ADDR:-127.0.0.1:8500}"
[[ "$CONSUL" == *://* ]] || CONSUL="http://$CONSUL"
KEY="${KEY:-consul-demo.txt}"
. "$(dirname "$0")/fencegate.sh"
LOCK="$CONSUL/v1/kv/fencegate/locks/$BUCKET/$KEY"

# session WHO: a new session (10 s TTL, no lock delay); prints its ID.
session() {
    curl -sS -X PUT -d "{\"Name\": \"fencegate-$1\", \"TTL\": \"10s\", \"LockDelay\": \"0s\"}" \
         "$CONSUL/v1/session/create" | python3 -c 'import json, sys; print(json.load(sys.stdin)["ID"])'
}
# lock WHO SESSION: acquire the key; prints the token (its ModifyIndex, read back consistently
# and only while SESSION holds it), or nothing when the lock is held by another session.
lock() {
    [[ "$(curl -sS -X PUT -d "$1" "$LOCK?acquire=$2")" == true ]] || return 0
    curl -sS "$LOCK?consistent" | python3 -c '
import json, sys
kv = json.load(sys.stdin)[0]
if kv.get("Session") == sys.argv[1]:
    print(kv["ModifyIndex"])' "$2"
}

SESSION_A="$(session A)" || fail "Consul is not reachable at $CONSUL"
TOKEN_A="$(lock A "$SESSION_A")"
[[ -n "$TOKEN_A" ]] || fail "the lock is held by another session"
echo "A holds the lock with token $TOKEN_A (the key's ModifyIndex)"
A1="$(write A "$TOKEN_A")"; echo "A writes -> $A1"; expect_written "$A1"

echo "A stalls; its session is destroyed, which releases its lock"
curl -sS -o /dev/null -X PUT "$CONSUL/v1/session/destroy/$SESSION_A"
SESSION_B="$(session B)"
for ((i = 0; i < 100; i++)); do    # B waits for the lock
    TOKEN_B="$(lock B "$SESSION_B")"; [[ -z "$TOKEN_B" ]] || break; sleep 0.1
done
[[ -n "$TOKEN_B" ]] || fail "B did not get the lock"
echo "B holds the lock with token $TOKEN_B"
B1="$(write B "$TOKEN_B")"; echo "B writes -> $B1"; expect_written "$B1"

A2="$(write A "$TOKEN_A")"; echo "A wakes up, writes with token $TOKEN_A -> $A2"
curl -sS -o /dev/null -X PUT "$CONSUL/v1/session/destroy/$SESSION_B"    # B releases
expect_zombie_refused "$A2" "$TOKEN_B"
