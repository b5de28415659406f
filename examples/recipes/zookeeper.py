#!/usr/bin/env python3
"""ZooKeeper: a Kazoo lock whose fencing token is the czxid of the holder's lock znode, and the
zombie it fences out:
  A takes the lock and token, writes; A stalls and its session ends, which deletes its znode;
  B takes the lock, whose znode is newer (a larger czxid), writes; A wakes up and writes with
  its old token: fencegate answers 409 StaleFencingToken, and the object keeps B's data.
The czxid is a 64-bit zxid that only grows; the znode's sequence suffix is not a token (a
signed 32-bit counter of the parent, which wraps and restarts when the parent is recreated).
Starts neither ZooKeeper nor fencegate. Exit 0 only if the zombie was refused. Needs kazoo
(Debian's python3-kazoo, or `pip install kazoo`).

Environment (defaults in brackets):
  ZK_HOSTS   ZooKeeper host:port list       [127.0.0.1:2181]
  FENCEGATE  fencegate host:port            [127.0.0.1:8080]
  BUCKET     object-scoped bucket           [default]
  KEY        the object the lock guards     [zk-demo.txt]
"""
import os
import sys
import urllib.error
import urllib.request

from kazoo.client import KazooClient

ZK = os.environ.get("ZK_HOSTS", "127.0.0.1:2181")
FENCEGATE = os.environ.get("FENCEGATE", "127.0.0.1:8080").removeprefix("http://")
BUCKET = os.environ.get("BUCKET", "default")
KEY = os.environ.get("KEY", "zk-demo.txt")
URL = f"http://{FENCEGATE}/v1/objects/{BUCKET}/{KEY}"
LOCK = f"/fencegate/locks/{BUCKET}/{KEY}"


def fail(why):
    sys.exit(f"FAIL: {why}")


def write(who, token):
    """PUT "written by WHO" with Fencing-Token TOKEN; returns (HTTP status, answer)."""
    req = urllib.request.Request(URL, data=f"written by {who}".encode(), method="PUT",
                                 headers={"Fencing-Token": str(token)})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def take_lock(who):
    """Connects, takes the lock and returns (client, token): the czxid of our lock znode."""
    zk = KazooClient(hosts=ZK, timeout=5.0)
    zk.start(timeout=10)
    lock = zk.Lock(LOCK, identifier=who)
    if not lock.acquire(timeout=30):
        fail(f"{who} did not get the lock {LOCK} within 30 s")
    stat = zk.exists(f"{lock.path}/{lock.node}")    # our own znode, not the lock's parent
    if stat is None:
        fail(f"{who} lost the lock before its first write")
    return zk, stat.czxid


a, token_a = take_lock("A")
print(f"A holds {LOCK} with token {token_a} (its znode's czxid)")
status, answer = write("A", token_a)
print(f"A writes -> {status} {answer}")
status < 300 or fail("A's write was not accepted")

# A stalls and its session ends: closed here by a second client on A's session id, which is
# what ZooKeeper does to a session that misses its timeout. A's code does not notice.
print("A stalls; its session ends, and ZooKeeper deletes its lock znode")
killer = KazooClient(hosts=ZK, client_id=a.client_id)
killer.start(timeout=10)
killer.stop()

b, token_b = take_lock("B")
print(f"B holds {LOCK} with token {token_b}")
status, answer = write("B", token_b)
print(f"B writes -> {status} {answer}")
status < 300 or fail("B's write was not accepted")

status, answer = write("A", token_a)
print(f"A wakes up, writes with token {token_a} -> {status} {answer}")
b.stop()
a.stop()
if status != 409 or '"StaleFencingToken"' not in answer or f'"highest":{token_b}' not in answer:
    fail("A's late write was not refused with 409 StaleFencingToken naming B's token")
with urllib.request.urlopen(URL, timeout=30) as r:
    got = r.read().decode()
got == "written by B" or fail(f"{BUCKET}/{KEY} holds {got!r}, not B's data")
print(f"GET {BUCKET}/{KEY} -> {got}")
print("PASS: A's late write was refused, the object holds B's data")
