#!/usr/bin/env bash
# Redis: a lock (SET NX PX) whose fencing token is an INCR counter drawn in the same atomic step
# (one EVAL), and the zombie it fences out:
#   A takes the lock and token, writes; A stalls past the lock's TTL; B takes the lock, gets a
#   larger token, writes; A wakes up and writes with its old token: fencegate answers 409
#   StaleFencingToken, and the object keeps B's data.
# A Redis lock (Redlock included) gives no token of its own; the counter is one. Drawing it in
# the same script as the SET makes token order the order of grants: an INCR after the SET could
# run after a later holder's, handing the stale holder the larger token.
# Starts neither Redis nor fencegate. Exit 0 only if the zombie was refused.
#
# Environment (defaults in brackets):
#   REDIS_URL  redis://host:port            [redis://127.0.0.1:6379]
#   FENCEGATE  fencegate host:port          [127.0.0.1:8080]
#   BUCKET     object-scoped bucket         [default]
#   KEY        the object the lock guards   [redis-demo.txt]
#   TTL_MS     the lock's TTL               [1000]
set -euo pipefail
REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379}"
KEY="${KEY:-redis-demo.txt}"
TTL_MS="${TTL_MS:-1000}"
. "$(dirname "$0")/fencegate.sh"
LOCK="lock:$BUCKET/$KEY"

# lock WHO: take the lock for TTL_MS and draw its token atomically; prints the token, or
# nothing when the lock is held.
lock() {
    redis-cli -u "$REDIS_URL" EVAL "
        if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
            return redis.call('INCR', KEYS[2])
        end" 2 "$LOCK" "$LOCK:token" "$1" "$TTL_MS"
}

redis-cli -u "$REDIS_URL" PING >/dev/null || fail "Redis is not reachable at $REDIS_URL"
TOKEN_A="$(lock A)"
[[ -n "$TOKEN_A" ]] || fail "the lock $LOCK is held by $(redis-cli -u "$REDIS_URL" GET "$LOCK")"
echo "A holds $LOCK with token $TOKEN_A"
A1="$(write A "$TOKEN_A")"; echo "A writes -> $A1"; expect_written "$A1"

echo "A stalls; its lock expires after ${TTL_MS} ms"
for ((i = 0; i < TTL_MS / 100 + 100; i++)); do    # B waits for the lock
    TOKEN_B="$(lock B)"; [[ -z "$TOKEN_B" ]] || break; sleep 0.1
done
[[ -n "$TOKEN_B" ]] || fail "B did not get the lock"
echo "B holds $LOCK with token $TOKEN_B"
B1="$(write B "$TOKEN_B")"; echo "B writes -> $B1"; expect_written "$B1"

A2="$(write A "$TOKEN_A")"; echo "A wakes up, writes with token $TOKEN_A -> $A2"
redis-cli -u "$REDIS_URL" EVAL "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end" \
    1 "$LOCK" B >/dev/null    # B releases: only its own lock
expect_zombie_refused "$A2" "$TOKEN_B"
