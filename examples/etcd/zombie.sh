#!/usr/bin/env bash
# The zombie scenario against a real etcd and a running fencegate: an etcd lock alone does not
# stop a stalled holder from writing, the fence does.
#
#   1. holder A takes the etcd lock (token A = its lock key's create_revision) and writes;
#   2. A stalls and its lock is lost: its etcd lease is revoked (LOSE=revoke, the default), or
#      A's etcdctl is frozen with SIGSTOP until its session TTL runs out (LOSE=expire);
#   3. holder B takes the lock with examples/etcd/fenced_write.sh (a larger create_revision)
#      and writes;
#   4. A wakes up and writes with its old token: fencegate must answer 409 StaleFencingToken,
#      and the object must still hold B's data.
#
# Exit 0 only if all of that holds; otherwise 1 with the reason (2: etcd, fencegate, etcdctl or
# python3 missing). It starts neither etcd nor fencegate.
#
# Environment (defaults in brackets):
#   ETCDCTL_ENDPOINTS  etcd client URLs                        [http://127.0.0.1:2379]
#   FENCEGATE          fencegate host:port                     [127.0.0.1:8080]
#   BUCKET             fencegate bucket                        [default]
#   KEY                object key                              [etcd-demo.txt]
#   LOCK               etcd lock name                          [fencegate/$BUCKET/$KEY]
#   LOSE               how A loses the lock: revoke | expire   [revoke]
#   A_TTL              A's etcd session TTL, seconds           [10 with revoke, 2 with expire]

set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# fg_lock_holder, fg_put and the environment defaults (ETCDCTL_API=3, FENCEGATE, BUCKET, ...).
# shellcheck source=fenced_write.sh
source "$HERE/fenced_write.sh"

# Holder A's critical section; runs under `etcdctl lock` (which sets ETCD_LOCK_KEY).
holder_a() {
    local work="$1" holder rev waited=0
    holder="$(fg_lock_holder "$LOCK")"
    rev="${holder##* }"
    if [[ -z "$holder" || "${holder% *}" != "${ETCD_LOCK_KEY:-}" ]]; then
        echo "A is not the holder (holder: ${holder:-nobody})" >"$work/a.error"
        return 3
    fi
    echo "$ETCD_LOCK_KEY $rev" >"$work/a.lock"
    printf 'written by A (token %s)\n' "$rev" >"$work/a1.data"
    fg_put "$rev" "$work/a1.data" "$work/a1.resp" >"$work/a1.status.tmp"
    mv "$work/a1.status.tmp" "$work/a1.status"
    # The stall: A is paused here (a GC pause, a VM migration) while the scenario takes its
    # lock away and lets B write. A does not notice: `etcdctl lock` never stops its command.
    while [[ ! -e "$work/go" ]]; do
        sleep 0.1
        waited=$((waited + 1))
        ((waited < 1200)) || return 4
    done
    printf 'late write by A (token %s)\n' "$rev" >"$work/a2.data"
    fg_put "$rev" "$work/a2.data" "$work/a2.resp" >"$work/a2.status.tmp"
    mv "$work/a2.status.tmp" "$work/a2.status"
}

if [[ "${1:-}" == --holder-a ]]; then
    holder_a "$2"
    exit
fi

LOSE="${LOSE:-revoke}"
case "$LOSE" in
    revoke) A_TTL="${A_TTL:-10}" ;;
    expire) A_TTL="${A_TTL:-2}" ;;
    *) echo "zombie: LOSE must be revoke or expire, not $LOSE" >&2; exit 2 ;;
esac

START="$EPOCHREALTIME"
step() { python3 -c 'import sys; print("[%6.2fs] %s" % (float(sys.argv[1]) - float(sys.argv[2]), sys.argv[3]))' "$EPOCHREALTIME" "$START" "$*"; }
fail() { echo "zombie: FAIL: $*" >&2; exit 1; }
# wait_for FILE SECONDS: wait until FILE exists.
wait_for() {
    local i
    for ((i = 0; i < $2 * 10; i++)); do
        [[ -e "$1" ]] && return 0
        [[ -e "$WORK/a.error" ]] && fail "holder A: $(cat "$WORK/a.error")"
        sleep 0.1
    done
    return 1
}

WORK="$(mktemp -d)"
A_PID=""
cleanup() {
    if [[ -n "$A_PID" ]] && kill -0 "$A_PID" 2>/dev/null; then
        kill -CONT "$A_PID" 2>/dev/null || true
        touch "$WORK/go"
        kill -TERM "$A_PID" 2>/dev/null || true
        wait "$A_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

for tool in etcdctl python3 curl; do
    command -v "$tool" >/dev/null || { echo "zombie: $tool not found on PATH" >&2; exit 2; }
done
etcdctl get --command-timeout=5s --keys-only --limit=1 "$LOCK/" >/dev/null 2>&1 ||
    { echo "zombie: etcd is not reachable at $ETCDCTL_ENDPOINTS" >&2; exit 2; }
curl -fsS -o /dev/null "http://$FENCEGATE/healthz" 2>/dev/null ||
    { echo "zombie: fencegate is not reachable at http://$FENCEGATE" >&2; exit 2; }

echo "zombie scenario: etcd $ETCDCTL_ENDPOINTS, fencegate $FENCEGATE, object $BUCKET/$KEY, lock $LOCK, A loses the lock by: $LOSE"

# 1. A takes the lock and writes.
etcdctl lock --ttl="$A_TTL" "$LOCK" -- bash "$HERE/zombie.sh" --holder-a "$WORK" >"$WORK/a.log" 2>&1 &
A_PID=$!
wait_for "$WORK/a1.status" 30 || fail "holder A did not get the lock and write within 30 s (is the lock $LOCK held by someone else?): $(cat "$WORK/a.log")"
read -r A_KEY TOKEN_A <"$WORK/a.lock"
A_STATUS="$(cat "$WORK/a1.status")"
step "A holds the lock: key $A_KEY, create_revision $TOKEN_A -> token A = $TOKEN_A"
if [[ "$A_STATUS" != 200 ]]; then
    cat "$WORK/a1.resp" >&2 2>/dev/null || true
    echo >&2
    if [[ "$A_STATUS" == 409 ]]; then
        fail "A's first write (token $TOKEN_A) was already refused: $BUCKET/$KEY's fence holds a higher token, probably from another etcd cluster (revisions of two clusters are not comparable). Use a fresh KEY or a fresh fencegate data dir."
    fi
    fail "A's first write got HTTP $A_STATUS, expected 200"
fi
step "A writes with token $TOKEN_A -> HTTP 200"

# 2. A stalls and loses the lock.
LEASE_HEX="${A_KEY##*/}"
if [[ "$LOSE" == revoke ]]; then
    etcdctl lease revoke "$LEASE_HEX" >/dev/null || fail "could not revoke A's lease $LEASE_HEX"
    step "A's etcd lease $LEASE_HEX is revoked: its lock key is gone, A's process runs on unaware"
else
    kill -STOP "$A_PID"
    step "A's etcdctl is frozen (SIGSTOP): no keep-alives; waiting for its ${A_TTL}s session to expire"
fi
for ((i = 0; i < (A_TTL + 30) * 10; i++)); do
    [[ -z "$(etcdctl get --keys-only "$A_KEY")" ]] && break
    sleep 0.1
done
[[ -z "$(etcdctl get --keys-only "$A_KEY")" ]] || fail "A's lock key $A_KEY is still in etcd"
[[ "$LOSE" == expire ]] && step "A's session expired: etcd deleted its lock key"

# 3. B takes the lock with the recipe and writes.
printf 'written by B at %s\n' "$(date -u +%FT%TZ)" >"$WORK/b.data"
B_RC=0
"$HERE/fenced_write.sh" "$WORK/b.data" >"$WORK/b.log" 2>&1 || B_RC=$?
TOKEN_B="$(sed -n 's/^token: *\([0-9]*\).*/\1/p' "$WORK/b.log")"
[[ "$B_RC" == 0 && -n "$TOKEN_B" ]] || fail "holder B's fenced_write.sh failed (exit $B_RC): $(cat "$WORK/b.log")"
step "B takes the lock with fenced_write.sh: token B = $TOKEN_B; writes -> HTTP 200"
((TOKEN_B > TOKEN_A)) || fail "token B ($TOKEN_B) is not above token A ($TOKEN_A)"

# 4. A wakes up and writes with its old token.
[[ "$LOSE" == expire ]] && kill -CONT "$A_PID"
touch "$WORK/go"
wait_for "$WORK/a2.status" 30 || fail "A's late write did not finish: $(cat "$WORK/a.log")"
A2_STATUS="$(cat "$WORK/a2.status")"
A2_ERROR="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("error", ""))' "$WORK/a2.resp" 2>/dev/null || true)"
A2_HIGHEST="$(tr -d '\r' <"$WORK/a2.resp.headers" | sed -n 's/^[Ff]encing-[Tt]oken-[Hh]ighest: *//p')"
step "A wakes up, writes with its old token $TOKEN_A -> HTTP $A2_STATUS ${A2_ERROR} (fencing-token-highest: ${A2_HIGHEST:-none})"
wait "$A_PID" 2>/dev/null || true
A_PID=""
[[ "$A2_STATUS" == 409 && "$A2_ERROR" == StaleFencingToken ]] ||
    fail "A's late write got HTTP $A2_STATUS $A2_ERROR, expected 409 StaleFencingToken: $(cat "$WORK/a2.resp")"
[[ "$A2_HIGHEST" == "$TOKEN_B" ]] ||
    fail "fencing-token-highest is ${A2_HIGHEST:-missing}, expected token B ($TOKEN_B)"

# The object holds B's data.
PATH_KEY="$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe="/"))' "$KEY")"
curl -fsS -o "$WORK/final" "http://$FENCEGATE/v1/objects/$BUCKET/$PATH_KEY" || fail "could not read $BUCKET/$KEY back"
cmp -s "$WORK/final" "$WORK/b.data" || fail "$BUCKET/$KEY does not hold B's data: $(cat "$WORK/final")"
step "GET $BUCKET/$KEY -> B's data: $(cat "$WORK/final")"
echo "PASS: the stale holder A (token $TOKEN_A) was fenced out after B (token $TOKEN_B) wrote"
