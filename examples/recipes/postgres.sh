#!/usr/bin/env bash
# PostgreSQL: a session advisory lock (pg_advisory_lock) whose fencing token is nextval() of a
# sequence drawn while holding it, and the zombie it fences out:
#   A takes the lock and token, writes; A stalls and its connection is cut, which releases the
#   lock; B takes the lock, gets a larger token, writes; A wakes up and writes with its old
#   token: fencegate answers 409 StaleFencingToken, and the object keeps B's data.
# The holder's psql session holds the lock and runs the write with `\!`: the lock lives as long
# as that session, and nothing stops the write when the session is gone, only the fence.
# Starts neither PostgreSQL nor fencegate (creates the sequence fence_seq if missing). Exit 0
# only if the zombie was refused.
#
# Environment (defaults in brackets):
#   PGURL      libpq URL of the database    [postgresql://postgres@127.0.0.1:5432/postgres]
#   FENCEGATE  fencegate host:port          [127.0.0.1:8080]
#   BUCKET     object-scoped bucket         [default]
#   KEY        the object the lock guards   [pg-demo.txt]
set -euo pipefail
PGURL="${PGURL:-postgresql://postgres@127.0.0.1:5432/postgres}"
KEY="${KEY:-pg-demo.txt}"
. "$(dirname "$0")/fencegate.sh"
LOCK="fencegate:$BUCKET/$KEY"

if [[ "${1:-}" == --critical-section ]]; then    # run by the holder's psql, with $TOKEN set
    who="$2" work="$3"
    echo "$TOKEN" >"$work/$who.token"
    write "$who" "$TOKEN" >"$work/$who.1.tmp"; mv "$work/$who.1.tmp" "$work/$who.1"
    if [[ "$who" == A ]]; then                    # A stalls until told to wake up
        while [[ ! -e "$work/go" ]]; do sleep 0.1; done
        write "$who" "$TOKEN" >"$work/$who.2.tmp"; mv "$work/$who.2.tmp" "$work/$who.2"
    fi
    exit 0
fi

# holder WHO: one psql session takes the lock, draws the token, and runs the critical section.
holder() {
    PGAPPNAME="holder-$1" psql "$PGURL" -X -q -v ON_ERROR_STOP=1 >/dev/null <<SQL
SET lock_timeout = '30s';
SELECT pg_advisory_lock(hashtext('$LOCK'));
SELECT nextval('fence_seq') AS token \gset
\setenv TOKEN :token
\! bash "$0" --critical-section $1 "$WORK"
SQL
}
sql() { psql "$PGURL" -X -q -At -v ON_ERROR_STOP=1 -c "$1"; }
# wait_for FILE: until the critical section wrote FILE (at most 30 s); prints its line
wait_for() {
    for ((i = 0; i < 300; i++)); do [[ -e "$1" ]] && { cat "$1"; return; }; sleep 0.1; done
    fail "no $(basename "$1") after 30 s"
}

WORK="$(mktemp -d)"
trap 'touch "$WORK/go"; wait; rm -rf "$WORK"' EXIT
sql "SET client_min_messages = warning; CREATE SEQUENCE IF NOT EXISTS fence_seq" || fail "PostgreSQL is not reachable at $PGURL"

holder A &
A1="$(wait_for "$WORK/A.1")"; TOKEN_A="$(cat "$WORK/A.token")"
echo "A holds the advisory lock with token $TOKEN_A"
echo "A writes -> $A1"; expect_written "$A1"

echo "A stalls; its connection is cut, and PostgreSQL releases its lock"
sql "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'holder-A'" >/dev/null
holder B      # waits for the lock, writes, and releases it when its session ends
B1="$(wait_for "$WORK/B.1")"; TOKEN_B="$(cat "$WORK/B.token")"
echo "B holds the advisory lock with token $TOKEN_B"
echo "B writes -> $B1"; expect_written "$B1"

touch "$WORK/go"
A2="$(wait_for "$WORK/A.2")"; echo "A wakes up, writes with token $TOKEN_A -> $A2"
expect_zombie_refused "$A2" "$TOKEN_B"
