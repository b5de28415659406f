#!/usr/bin/env bash
# Write one object through fencegate while holding an etcd lock, fenced by the lock's token.
#
#   KEY=etcd-report.csv examples/etcd/fenced_write.sh ./report.csv     # or `-` to read stdin
#
# The fencing token is the **create_revision** of the lock key that `etcdctl lock` created
# (`<lock>/<lease-id-hex>`): etcd revisions only grow, and the holder of an etcd lock is the key
# under the lock's prefix with the smallest create_revision, so every new holder's token is
# larger than every previous holder's. The lease ID is NOT a token: lease IDs are not ordered.
#
# Environment (defaults in brackets):
#   ETCDCTL_ENDPOINTS  etcd client URLs                  [http://127.0.0.1:2379]
#   FENCEGATE          fencegate host:port               [127.0.0.1:8080]
#   BUCKET             fencegate bucket                  [default]
#   KEY                object key                        [etcd-demo.txt]
#   LOCK               etcd lock name                    [fencegate/$BUCKET/$KEY]
#   LOCK_TTL           etcd session TTL in seconds       [10]
#
# Prints the token used and fencegate's HTTP status. Exit status: 0 written; 1 fencegate
# refused the write (409 StaleFencingToken: a newer holder has written, or any other non-2xx);
# 2 usage error; 3 the lock could not be taken or was lost before the write.
#
# The functions below (fg_lock_holder, fg_put) are reused by zombie.sh: `source` this file to
# get them without running anything.

set -euo pipefail

export ETCDCTL_API=3
export ETCDCTL_ENDPOINTS="${ETCDCTL_ENDPOINTS:-http://127.0.0.1:2379}"
FENCEGATE="${FENCEGATE:-127.0.0.1:8080}"
FENCEGATE="${FENCEGATE#http://}"
BUCKET="${BUCKET:-default}"
KEY="${KEY:-etcd-demo.txt}"
LOCK="${LOCK:-fencegate/$BUCKET/$KEY}"
LOCK_TTL="${LOCK_TTL:-10}"

# fg_lock_holder LOCK -> prints "<holder-key> <create_revision>" of the current holder of the
# etcd lock LOCK: the key under "LOCK/" with the smallest create_revision. Prints nothing if
# nobody holds it.
fg_lock_holder() {
    etcdctl get "$1/" --prefix --sort-by=CREATE --order=ASCEND --limit=1 -w json |
        python3 -c '
import base64, json, sys
kvs = json.load(sys.stdin).get("kvs") or []
if kvs:
    print(base64.b64decode(kvs[0]["key"]).decode(), int(kvs[0]["create_revision"]))
'
}

# fg_put TOKEN FILE [OUT] -> PUT FILE to $BUCKET/$KEY with Fencing-Token TOKEN. Prints the HTTP
# status on stdout; the response body goes to OUT (default: discarded) and the response
# headers to OUT.headers.
fg_put() {
    local token="$1" file="$2" out="${3:-}" path
    path="$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe="/"))' "$KEY")"
    local headers=/dev/null
    [[ -n "$out" ]] && headers="$out.headers"
    local code
    code="$(curl -sS -o "${out:-/dev/null}" -D "$headers" -w '%{http_code}' \
        -X PUT -H "Fencing-Token: $token" --data-binary @"$file" \
        "http://$FENCEGATE/v1/objects/$BUCKET/$path")" || true
    echo "${code:-000}"
}

# Runs inside `etcdctl lock ... --`, which sets ETCD_LOCK_KEY to the key it created.
_fg_locked_write() {
    local file="$1" result="$2" holder rev status body
    holder="$(fg_lock_holder "$LOCK")"
    rev="${holder##* }"
    if [[ -z "$holder" || "${holder% *}" != "${ETCD_LOCK_KEY:-}" ]]; then
        echo "fenced_write: lost the lock before writing (holder is now: ${holder:-nobody}; ours: ${ETCD_LOCK_KEY:-?})" >&2
        echo "lost" >"$result"
        return 3
    fi
    body="$(mktemp)"
    status="$(fg_put "$rev" "$file" "$body")"
    echo "lock:   $LOCK (key $ETCD_LOCK_KEY)"
    echo "token:  $rev (create_revision of the lock key)"
    echo "PUT http://$FENCEGATE/v1/objects/$BUCKET/$KEY -> HTTP $status"
    [[ -s "$body" ]] && { cat "$body"; echo; }
    rm -f "$body" "$body.headers"
    echo "$status $rev" >"$result"
    [[ "$status" == 2?? ]]
}

_fg_main() {
    if [[ $# -ne 1 || "$1" == -h || "$1" == --help ]]; then
        sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
        exit 2
    fi
    local file="$1" rc=0 status
    tmp="" result=""
    trap 'rm -f ${result:+"$result"} ${tmp:+"$tmp"}' EXIT
    command -v etcdctl >/dev/null || { echo "fenced_write: etcdctl not found on PATH" >&2; exit 2; }
    command -v python3 >/dev/null || { echo "fenced_write: python3 not found on PATH" >&2; exit 2; }
    if [[ "$file" == - ]]; then
        tmp="$(mktemp)"
        cat >"$tmp"
        file="$tmp"
    fi
    [[ -r "$file" ]] || { echo "fenced_write: cannot read $file" >&2; exit 2; }
    # `etcdctl lock` retries an unreachable cluster forever; fail fast instead.
    if ! etcdctl get --command-timeout=5s --keys-only --limit=1 "$LOCK/" >/dev/null; then
        echo "fenced_write: etcd is not reachable at $ETCDCTL_ENDPOINTS" >&2
        exit 3
    fi
    result="$(mktemp)"
    # The exec form holds the lock (keeping its session alive) while the command runs, then
    # unlocks. Note it does NOT stop the command if the session expires meanwhile: only the
    # fence protects the write from that.
    etcdctl lock --ttl="$LOCK_TTL" "$LOCK" -- bash "${BASH_SOURCE[0]}" --locked "$file" "$result" ||
        rc=$?
    status="$(cat "$result" 2>/dev/null || true)"
    case "$status" in
        2??\ *) exit 0 ;;
        lost) exit 3 ;;
        "") echo "fenced_write: could not take etcd lock $LOCK at $ETCDCTL_ENDPOINTS (etcdctl exit $rc)" >&2
            exit 3 ;;
        000\ *) echo "fenced_write: fencegate is not reachable at $FENCEGATE" >&2
           exit 1 ;;
        *) echo "fenced_write: fencegate refused the write (HTTP ${status%% *})" >&2
           exit 1 ;;
    esac
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    if [[ "${1:-}" == --locked ]]; then
        shift
        _fg_locked_write "$@"
    else
        _fg_main "$@"
    fi
fi
