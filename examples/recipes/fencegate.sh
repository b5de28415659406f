# shellcheck shell=bash
# The fencegate side of the recipes' zombie timeline, sourced by each recipe (bash):
#   write WHO TOKEN       PUT "written by WHO" with Fencing-Token TOKEN; prints the HTTP status
#                         and fencegate's answer on one line ("200 {...}", "409 {...}")
#   expect_written LINE   fail unless LINE (from write) is a 2xx
#   expect_zombie_refused LINE TOKEN_B
#                         fail unless LINE is 409 StaleFencingToken naming TOKEN_B as highest,
#                         and the object holds B's data; then print PASS
#
# Environment (defaults in brackets):
#   FENCEGATE  fencegate host:port, or FENCEGATE_URL as the Python client takes it
#              (http://host:port)     [127.0.0.1:8080]
#   BUCKET     a bucket of object scope, tokens required or optional   [default]
#   KEY        the object the lock guards   [set by each recipe]

FENCEGATE="${FENCEGATE:-${FENCEGATE_URL:-127.0.0.1:8080}}"
FENCEGATE="${FENCEGATE#http://}"
FENCEGATE="${FENCEGATE%/}"
BUCKET="${BUCKET:-default}"
URL="http://$FENCEGATE/v1/objects/$BUCKET/$KEY"

write() {
    curl -sS -X PUT -H "Fencing-Token: $2" --data-binary "written by $1" \
         -w ' %{http_code}' "$URL" | sed -E 's/^(.*) ([0-9]{3})$/\2 \1/'
}

fail() { echo "FAIL: $*" >&2; exit 1; }

expect_written() {
    [[ "$1" == 2??\ * ]] || fail "the write was not accepted: $1"
}

expect_zombie_refused() {
    local line="$1" token_b="$2" got
    [[ "$line" == 409\ *'"StaleFencingToken"'* ]] || fail "A's late write was not refused with 409 StaleFencingToken: $line"
    [[ "$line" == *"\"highest\":$token_b"[,\}]* ]] || fail "the refusal does not name B's token $token_b: $line"
    got="$(curl -sS "$URL")"
    [[ "$got" == "written by B" ]] || fail "$BUCKET/$KEY holds \"$got\", not B's data"
    echo "GET $BUCKET/$KEY -> $got"
    echo "PASS: A's late write was refused, the object holds B's data"
}
