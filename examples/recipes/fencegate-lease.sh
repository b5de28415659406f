#!/usr/bin/env bash
# fencegate's own leases: the lease's token, bound to the object it guards, and the zombie it
# fences out:
#   A acquires the lease and writes; A stalls past the lease's TTL; B acquires it (waiting for
#   A's to expire), which fences the object at B's larger token before B writes anything, and
#   writes; A wakes up and writes with its old token: fencegate answers 409 StaleFencingToken,
#   and the object keeps B's data.
# Needs nothing but a running fencegate (it starts none). Exit 0 only if the zombie was refused.
#
# Environment (defaults in brackets):
#   FENCEGATE  fencegate host:port          [127.0.0.1:8080]
#   BUCKET     object-scoped bucket         [default]
#   KEY        the object the lease guards  [lease-demo.txt]
#   TTL_MS     the lease's TTL              [1000]
set -euo pipefail
KEY="${KEY:-lease-demo.txt}"
TTL_MS="${TTL_MS:-1000}"
. "$(dirname "$0")/fencegate.sh"
LEASES="http://$FENCEGATE/v1/leases/fencegate-demo%2F${KEY//\//%2F}"   # a `/` in a name is sent as %2F

# acquire WHO: the grant's JSON (its "token", and the "lease_secret" that renews or releases it).
acquire() {
    curl -sS -X POST "$LEASES" -d "{\"holder\": \"$1\", \"ttl_ms\": $TTL_MS, \"wait_ms\": 30000,
                                    \"bucket\": \"$BUCKET\", \"key\": \"$KEY\"}"
}
field() { sed -n "s/.*\"$1\":\"\{0,1\}\([^,\"}]*\).*/\1/p" <<<"$2"; }

GRANT_A="$(acquire A)"; TOKEN_A="$(field token "$GRANT_A")"
[[ -n "$TOKEN_A" ]] || fail "A's acquire: $GRANT_A"
echo "A holds the lease with token $TOKEN_A"
A1="$(write A "$TOKEN_A")"; echo "A writes -> $A1"; expect_written "$A1"

echo "A stalls past its ${TTL_MS} ms TTL"
GRANT_B="$(acquire B)"; TOKEN_B="$(field token "$GRANT_B")"    # waits for A's lease to expire
[[ -n "$TOKEN_B" ]] || fail "B's acquire: $GRANT_B"
echo "B holds the lease with token $TOKEN_B (the grant fenced the object at it)"
B1="$(write B "$TOKEN_B")"; echo "B writes -> $B1"; expect_written "$B1"

A2="$(write A "$TOKEN_A")"; echo "A wakes up, writes with token $TOKEN_A -> $A2"
curl -sS -o /dev/null -X DELETE "$LEASES" \
     -d "{\"holder\": \"B\", \"token\": $TOKEN_B, \"secret\": \"$(field lease_secret "$GRANT_B")\"}"
expect_zombie_refused "$A2" "$TOKEN_B"
