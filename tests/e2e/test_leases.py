"""Job leases: POST /v1/leases, renew, release; sandboxes tied to a lease are deleted or paused
(`on_lease_expiry`) when it expires unrenewed or is released; leases belong to the principal
that took them; the SDK's Lease renews in the background, and a killed holder leaks nothing.

Not covered here: leases surviving a daemon restart (other tests restart the server)."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import e2e_util as u

MAX_TTL = 7 * 86400
# How late past its expiry a lease's sandboxes may still be there: the reaper polls every 0.5 s
# and the contract says "within about half a second"; the margin is for a loaded 2-core host.
REAP_SLACK = 3.0


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------
def _ts(s: str) -> float:
    """An RFC 3339 UTC timestamp as Unix seconds."""
    assert isinstance(s, str) and s.endswith("Z"), s
    return datetime.datetime.fromisoformat(s[:-1] + "+00:00").timestamp()


@pytest.fixture
def leases(server):
    """make(ttl_s=..., token=...) -> lease doc (or raw body=...); every lease is released after
    the test (404s ignored: expired or released by the test)."""
    made = []

    def make(token=None, body=None, **fields):
        r = server.http("POST", "/v1/leases", body if body is not None else fields, token=token)
        assert r.status == 200, r
        made.append(r.json["id"])
        return r.json

    make.ids = made
    yield make
    for lid in made:
        try:
            server.http("DELETE", "/v1/leases/" + lid, timeout=60)   # the admin may release any
        except Exception as e:
            print(f"\nwarning: could not release lease {lid}: {e}", file=sys.stderr)


def _create(server, sandboxes, image, token=None, **spec):
    r = server.http("POST", "/v1/sandboxes", dict(image=image, **spec), token=token)
    assert r.status == 201, r
    sandboxes.append(r.json["id"])
    return r.json


def _state(server, sid):
    """The sandbox's state, or None once it is gone (404)."""
    r = server.http("GET", "/v1/sandboxes/" + sid)
    if r.status == 404:
        u.assert_error(r, 404, "not_found")
        return None
    assert r.status == 200, r
    return r.json["state"]


def _renew(server, lid, body=None, token=None):
    return server.http("POST", f"/v1/leases/{lid}/renew", body, token=token)


# --------------------------------------------------------------------------
# the lease resource
# --------------------------------------------------------------------------
def test_create_lease_shape_and_expiry(server, leases):
    before = time.time()
    doc = leases(ttl_s=30)
    after = time.time()
    assert set(doc) >= {"id", "owner", "ttl_s", "created_at", "expires_at"}, doc
    assert isinstance(doc["id"], str) and doc["id"].startswith("ls-") and len(doc["id"]) > 3, doc
    assert doc["owner"] == "admin", doc
    assert doc["ttl_s"] == 30, doc
    created, expires = _ts(doc["created_at"]), _ts(doc["expires_at"])
    assert before - 1 <= created <= after + 1, doc
    assert abs((expires - created) - 30) < 0.01, doc
    # Ids are unique; fractional seconds are kept.
    other = leases(ttl_s=1.5)
    assert other["id"] != doc["id"]
    assert other["ttl_s"] == 1.5 and abs(_ts(other["expires_at"]) - _ts(other["created_at"]) - 1.5) < 0.01, other


@pytest.mark.parametrize("body", [None, "", {}, {"ttl_s": None}], ids=["no-body", "empty", "{}", "null-ttl"])
def test_lease_ttl_defaults_to_60s(server, leases, body):
    r = server.http("POST", "/v1/leases", body)
    assert r.status == 200, r
    leases.ids.append(r.json["id"])
    assert r.json["ttl_s"] == 60, r
    assert abs(_ts(r.json["expires_at"]) - _ts(r.json["created_at"]) - 60) < 0.01, r


@pytest.mark.parametrize("ttl", [1, MAX_TTL], ids=["min", "max"])
def test_lease_ttl_bounds_accepted(server, leases, ttl):
    doc = leases(ttl_s=ttl)
    assert doc["ttl_s"] == ttl
    assert abs(_ts(doc["expires_at"]) - _ts(doc["created_at"]) - ttl) < 0.01, doc


BAD_LEASE_BODIES = [
    ({"ttl_s": 0}, "zero"),
    ({"ttl_s": 0.999}, "below-1"),
    ({"ttl_s": -1}, "negative"),
    ({"ttl_s": -604800}, "very-negative"),
    ({"ttl_s": MAX_TTL + 1}, "above-max"),
    ({"ttl_s": 1e12}, "huge"),
    ('{"ttl_s": 1e999}', "overflow"),
    ('{"ttl_s": NaN}', "nan"),
    ({"ttl_s": "60"}, "string"),
    ({"ttl_s": True}, "bool"),
    ({"ttl_s": [60]}, "array"),
    ({"ttl_s": {"s": 60}}, "object"),
    ({"ttl_s": 60, "owner": "x"}, "unknown-field"),
    ({"ttl": 60}, "misspelt-field"),
    ([], "array-body"),
    ("null", "null-body"),
    ("60", "number-body"),
    ('{"ttl_s": 60', "truncated-json"),
    ("not json", "garbage"),
]


@pytest.mark.parametrize("body", [b for b, _ in BAD_LEASE_BODIES], ids=[i for _, i in BAD_LEASE_BODIES])
def test_bad_lease_requests_are_400(server, leases, body):
    r = server.http("POST", "/v1/leases", body)
    if r.status == 200:                 # do not leak it
        leases.ids.append(r.json["id"])
    u.assert_error(r, 400, "invalid")


def test_renew_pushes_expiry_and_keeps_or_changes_ttl(server, leases):
    doc = leases(ttl_s=30)
    lid = doc["id"]
    time.sleep(0.2)
    # No body (and an empty object): the lease's own ttl.
    for body in (None, {}):
        t0 = time.time()
        r = _renew(server, lid, body)
        assert r.status == 200, r
        assert r.json["id"] == lid and r.json["owner"] == "admin" and r.json["ttl_s"] == 30, r
        assert r.json["created_at"] == doc["created_at"], "renewing changed created_at"
        exp = _ts(r.json["expires_at"])
        assert exp > _ts(doc["expires_at"]), (doc, r.json)
        assert t0 + 30 - 1 <= exp <= time.time() + 30 + 1, r.json
    # A new ttl replaces the old one, and is kept by the next renewal.
    r = _renew(server, lid, {"ttl_s": 120})
    assert r.status == 200 and r.json["ttl_s"] == 120, r
    assert abs(_ts(r.json["expires_at"]) - time.time() - 120) < 2, r.json
    r = _renew(server, lid)
    assert r.status == 200 and r.json["ttl_s"] == 120, r
    # Bad renewals are 400 and leave the lease alone.
    for body, _ in BAD_LEASE_BODIES:
        u.assert_error(_renew(server, lid, body), 400, "invalid")
    r = _renew(server, lid)
    assert r.status == 200 and r.json["ttl_s"] == 120, r


def test_unknown_released_and_expired_leases_are_404(server, leases, image, sandboxes):
    for lid in ("ls-0000000000000000", "nope", "ls-" + "f" * 200):
        u.assert_error(_renew(server, lid), 404, "not_found")
        u.assert_error(server.http("DELETE", "/v1/leases/" + lid), 404, "not_found")
    # Released: gone for renew, release and new sandboxes.
    lid = leases(ttl_s=60)["id"]
    r = server.http("DELETE", "/v1/leases/" + lid)
    assert r.status == 204 and r.body == b"", r
    u.assert_error(_renew(server, lid), 404, "not_found")
    u.assert_error(server.http("DELETE", "/v1/leases/" + lid), 404, "not_found")
    u.assert_error(server.http("POST", "/v1/sandboxes", {"image": image, "lease": lid}), 400, "invalid")
    # Expired (1 s, not renewed): the same, even before the reaper has run.
    lid = leases(ttl_s=1)["id"]
    time.sleep(1.2)
    u.assert_error(_renew(server, lid), 404, "not_found")
    u.assert_error(server.http("POST", "/v1/sandboxes", {"image": image, "lease": lid}), 400, "invalid")
    time.sleep(1.0)                     # now surely reaped too
    u.assert_error(server.http("DELETE", "/v1/leases/" + lid), 404, "not_found")
    u.assert_error(_renew(server, lid), 404, "not_found")
    assert not [s for s in server.http("GET", "/v1/sandboxes").json["sandboxes"] if s.get("lease") == lid]


@pytest.mark.parametrize("spec", [
    {"lease": "ls-doesnotexist0000"},
    {"lease": ""},
    {"lease": 7},
    {"lease": ["ls-1"]},
    {"lease": {"id": "ls-1"}},
    {"on_lease_expiry": "keep"},
    {"on_lease_expiry": "DELETE"},
    {"on_lease_expiry": ""},
    {"on_lease_expiry": 1},
], ids=["unknown", "empty", "number", "array", "object", "expiry-keep", "expiry-upper", "expiry-empty",
        "expiry-number"])
def test_bad_lease_fields_in_a_spec_are_400(server, image, sandboxes, spec):
    r = server.http("POST", "/v1/sandboxes", dict(image=image, **spec))
    if r.status == 201:
        sandboxes.append(r.json["id"])
    u.assert_error(r, 400, "invalid")


def test_batch_with_an_unknown_lease_creates_nothing(server, image, sandboxes):
    r = server.http("POST", "/v1/sandboxes:batch", {"count": 2, "spec": {"image": image, "lease": "ls-nope"}})
    if r.status == 200:
        sandboxes.extend(s["id"] for s in r.json["sandboxes"])
        assert r.json["sandboxes"] == [], r
        assert [e["error"]["code"] for e in r.json["errors"]] == ["invalid", "invalid"], r
    else:
        u.assert_error(r, 400, "invalid")


def test_sandbox_records_its_lease(server, leases, image, sandboxes):
    lid = leases(ttl_s=60)["id"]
    sb = _create(server, sandboxes, image, lease=lid, on_lease_expiry="pause")
    assert sb["lease"] == lid and sb["on_lease_expiry"] == "pause", sb
    got = server.http("GET", "/v1/sandboxes/" + sb["id"]).json
    assert got["lease"] == lid and got["on_lease_expiry"] == "pause", got
    plain = _create(server, sandboxes, image)
    assert plain["lease"] is None and plain["on_lease_expiry"] == "delete", plain


# --------------------------------------------------------------------------
# expiry and release
# --------------------------------------------------------------------------
def test_unrenewed_lease_deletes_or_pauses_its_sandboxes(server, leases, image, sandboxes):
    ttl = 1
    keep_lid = leases(ttl_s=600)["id"]
    lid = leases(ttl_s=600)["id"]
    gone = _create(server, sandboxes, image, lease=lid)["id"]                     # default: delete
    gone2 = _create(server, sandboxes, image, lease=lid, on_lease_expiry="delete")["id"]
    frozen = _create(server, sandboxes, image, lease=lid, on_lease_expiry="pause")["id"]
    loose = _create(server, sandboxes, image)["id"]                               # no lease
    other = _create(server, sandboxes, image, lease=keep_lid)["id"]               # a live lease
    r = server.http("PUT", f"/v1/sandboxes/{frozen}/files?path=/tmp/state", b"kept\n")
    assert r.status == 204, r
    # Set up; now the lease gets a 1 s ttl and is never renewed again.
    t0 = time.time()
    r = _renew(server, lid, {"ttl_s": ttl})
    assert r.status == 200 and r.json["ttl_s"] == ttl, r
    assert [_state(server, s) for s in (gone, gone2, frozen)] == ["running"] * 3

    def done():
        return _state(server, gone) is None and _state(server, gone2) is None and \
            _state(server, frozen) == "paused"

    assert u.wait_until(done, timeout=ttl + 20, interval=0.05), \
        [_state(server, s) for s in (gone, gone2, frozen)]
    took = time.time() - t0
    assert ttl - 0.2 <= took <= ttl + REAP_SLACK, \
        f"the lease's sandboxes were reaped {took:.2f}s after its last renewal (ttl {ttl}s)"
    # Nothing else was touched.
    assert _state(server, loose) == "running"
    assert _state(server, other) == "running"
    # The paused sandbox is the same computer, frozen: exec is refused until resumed.
    u.assert_error(server.http("POST", f"/v1/sandboxes/{frozen}/exec", {"argv": ["true"]}), 409, "conflict")
    r = server.http("POST", f"/v1/sandboxes/{frozen}/resume")
    assert r.status == 200 and r.json["state"] == "running", r
    r = server.http("POST", f"/v1/sandboxes/{frozen}/exec", {"argv": ["cat", "/tmp/state"]})
    assert r.status == 200 and r.json["stdout"] == "kept\n", r
    # The expired lease is gone for good.
    u.assert_error(_renew(server, lid), 404, "not_found")
    u.assert_error(server.http("POST", "/v1/sandboxes", {"image": image, "lease": lid}), 400, "invalid")


def test_renewed_lease_keeps_its_sandbox_then_lapses(server, leases, image, sandboxes):
    ttl = 2
    lid = leases(ttl_s=ttl)["id"]
    sid = _create(server, sandboxes, image, lease=lid)["id"]
    end = time.time() + 1.5 * ttl + 0.5
    last = time.time()
    while time.time() < end:
        time.sleep(0.3)
        last = time.time()
        r = _renew(server, lid)
        assert r.status == 200, f"renewal failed: {r!r}"
    assert _state(server, sid) == "running", "a lease renewed every 0.3s let its sandbox go (after more than a ttl)"
    # Stop renewing: it lapses one ttl after the last renewal, not before.
    assert u.wait_until(lambda: _state(server, sid) is None, timeout=ttl + 20, interval=0.05), \
        "the sandbox outlived its lapsed lease"
    after = time.time() - last
    assert after >= ttl - 0.2, f"reaped {after:.2f}s after the last renewal, before the ttl ({ttl}s)"
    assert after <= ttl + REAP_SLACK, f"reaped {after:.2f}s after the last renewal (ttl {ttl}s)"


def test_release_applies_the_expiry_action_at_once(server, leases, image, sandboxes):
    lid = leases(ttl_s=600)["id"]
    gone = _create(server, sandboxes, image, lease=lid)["id"]
    frozen = _create(server, sandboxes, image, lease=lid, on_lease_expiry="pause")["id"]
    r = server.http("POST", "/v1/sandboxes:batch", {"count": 2, "spec": {"image": image, "lease": lid}})
    assert r.status == 200 and not r.json["errors"], r
    batch = [s["id"] for s in r.json["sandboxes"]]
    sandboxes.extend(batch)
    assert len(batch) == 2 and all(s["lease"] == lid for s in r.json["sandboxes"]), r
    loose = _create(server, sandboxes, image)["id"]
    r = server.http("DELETE", "/v1/leases/" + lid)
    assert r.status == 204, r
    # "At once": already done when the release answers.
    assert _state(server, gone) is None
    assert [_state(server, s) for s in batch] == [None, None]
    assert _state(server, frozen) == "paused"
    assert _state(server, loose) == "running"
    u.assert_error(_renew(server, lid), 404, "not_found")


def test_a_sandbox_deleted_by_hand_does_not_disturb_its_lease(server, leases, image, sandboxes):
    lid = leases(ttl_s=600)["id"]
    a = _create(server, sandboxes, image, lease=lid)["id"]
    b = _create(server, sandboxes, image, lease=lid)["id"]
    assert server.http("DELETE", "/v1/sandboxes/" + a).status == 204
    r = _renew(server, lid)
    assert r.status == 200, r
    assert _state(server, b) == "running"
    assert server.http("DELETE", "/v1/leases/" + lid).status == 204
    assert _state(server, b) is None


# --------------------------------------------------------------------------
# principals
# --------------------------------------------------------------------------
def test_leases_belong_to_their_principal(server, leases, tokens, image, sandboxes):
    a_name, a = tokens()
    _, b = tokens()
    la = leases(ttl_s=600, token=a)
    assert la["owner"] == a_name, la
    lid = la["id"]
    # b: the lease does not exist.
    u.assert_error(_renew(server, lid, token=b), 404, "not_found")
    u.assert_error(_renew(server, lid, {"ttl_s": 1}, token=b), 404, "not_found")
    u.assert_error(server.http("DELETE", "/v1/leases/" + lid, token=b), 404, "not_found")
    r = server.http("POST", "/v1/sandboxes", {"image": image, "lease": lid}, token=b)
    if r.status == 201:
        sandboxes.append(r.json["id"])
    u.assert_error(r, 400, "invalid")
    r = server.http("POST", "/v1/sandboxes:batch", {"count": 1, "spec": {"image": image, "lease": lid}}, token=b)
    if r.status == 200:
        sandboxes.extend(s["id"] for s in r.json["sandboxes"])
        assert r.json["sandboxes"] == [] and [e["error"]["code"] for e in r.json["errors"]] == ["invalid"], r
    else:
        u.assert_error(r, 400, "invalid")
    # a: it works, untouched by b's attempts (b's ttl_s 1 renewal did not shorten it).
    sid = _create(server, sandboxes, image, token=a, lease=lid)["id"]
    r = _renew(server, lid, token=a)
    assert r.status == 200 and r.json["ttl_s"] == 600 and r.json["owner"] == a_name, r
    # ... and a cannot use b's lease either.
    lb = leases(ttl_s=600, token=b)["id"]
    r = server.http("POST", "/v1/sandboxes", {"image": image, "lease": lb}, token=a)
    if r.status == 201:
        sandboxes.append(r.json["id"])
    u.assert_error(r, 400, "invalid")
    # b releasing its own lease does not touch a's sandbox; a releasing a's does.
    assert server.http("DELETE", "/v1/leases/" + lb, token=b).status == 204
    assert _state(server, sid) == "running"
    assert server.http("DELETE", "/v1/leases/" + lid, token=a).status == 204
    assert _state(server, sid) is None


def test_leases_need_the_sandbox_write_scope(server, tokens):
    _, ro = tokens(scopes=["sandbox:read", "exec"])
    u.assert_error(server.http("POST", "/v1/leases", {"ttl_s": 60}, token=ro), 403, "forbidden")
    u.assert_error(_renew(server, "ls-0000000000000000", token=ro), 403, "forbidden")
    u.assert_error(server.http("DELETE", "/v1/leases/ls-0000000000000000", token=ro), 403, "forbidden")


def test_leases_need_a_token(server):
    r = server.http("POST", "/v1/leases", {"ttl_s": 60}, auth=False)
    if r.status == 200:
        server.http("DELETE", "/v1/leases/" + r.json["id"])
    u.assert_error(r, 401, "unauthorized")


# --------------------------------------------------------------------------
# the SDK
# --------------------------------------------------------------------------
def test_sdk_lease_renews_in_the_background_and_releases_on_exit(server, image, sandboxes):
    import warren
    client = server.client()
    ttl = 2
    with client.lease(ttl=ttl) as lease:
        assert lease.id.startswith("ls-")
        sb = client.create(image=image, lease=lease, on_lease_expiry="delete")
        sandboxes.append(sb.id)
        assert sb.lease == lease.id
        time.sleep(ttl * 1.75)                          # well past one ttl
        assert client.get(sb.id).state == "running", "the SDK's background renewal did not keep the lease"
        assert lease.error is None, lease.error
        assert sb.run("echo alive").stdout == "alive\n"
    # Leaving the block released the lease: the sandbox is gone at once.
    with pytest.raises(warren.NotFound):
        client.get(sb.id)
    u.assert_error(_renew(server, lease.id), 404, "not_found")


_HOLDER = r"""
import json, sys, time
import warren
c = warren.Client()
lease = c.lease(ttl=float(sys.argv[3]))
sb = c.create(image=sys.argv[1], lease=lease, trajectory=sys.argv[2], labels={"e2e": "lease-holder"})
steps = [sb.run("echo one >> /tmp/log; cat /tmp/log", step=0).raw,
         sb.run("echo two >> /tmp/log; cat /tmp/log", step=1).raw]
print(json.dumps({"lease": lease.id, "sandbox": sb.id, "steps": steps}), flush=True)
time.sleep(3600)
"""


def test_a_killed_lease_holder_leaks_nothing_and_its_trajectory_replays(server, image, sandboxes, tmp_path):
    """A trainer takes a lease (SDK, ttl 2 s), records two trajectory steps and is SIGKILLed:
    its sandbox is reaped about a ttl later; the restarted trainer gets a new sandbox on which the
    recorded steps re-run to rebuild its files and replay the record, and the next step runs."""
    ttl = 2
    T = u.unique("traj-holder")
    script = tmp_path / "holder.py"
    script.write_text(_HOLDER)
    proc = subprocess.Popen([sys.executable, str(script), image, T, str(ttl)], env=server.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    sid = lid = None
    try:
        line = proc.stdout.readline()
        if not line:
            proc.wait(timeout=30)
            pytest.fail(f"the lease holder exited {proc.returncode}: {proc.stderr.read()}")
        info = json.loads(line)
        sid, lid, recorded = info["sandbox"], info["lease"], info["steps"]
        sandboxes.append(sid)
        assert [r["stdout"] for r in recorded] == ["one\n", "one\ntwo\n"], recorded
        time.sleep(ttl * 1.5)                           # the holder's renewals keep it alive
        assert proc.poll() is None, proc.stderr.read()
        assert _state(server, sid) == "running", "the sandbox went while its holder was renewing"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        killed = time.time()
        assert u.wait_until(lambda: _state(server, sid) is None, timeout=ttl + 30, interval=0.05), \
            "the sandbox of a killed lease holder is still there"
        took = time.time() - killed
        assert took <= ttl + REAP_SLACK, f"reaped {took:.2f}s after its holder died (ttl {ttl}s)"
        u.assert_error(_renew(server, lid), 404, "not_found")
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()
        if lid:
            server.http("DELETE", "/v1/leases/" + lid)
    # The restarted trainer.
    client = server.client()
    with client.lease(ttl=60) as lease:
        sb = client.create(image=image, lease=lease, trajectory=T)
        sandboxes.append(sb.id)
        assert sb.id != sid and sb.lease == lease.id
        r0 = sb.run("echo one >> /tmp/log; cat /tmp/log", step=0)
        r1 = sb.run("echo two >> /tmp/log; cat /tmp/log", step=1)
        assert (r0.replayed, r1.replayed) == (True, True)
        assert [r0.raw["exec_id"], r1.raw["exec_id"]] == [r["exec_id"] for r in recorded]
        assert (r0.stdout, r1.stdout) == ("one\n", "one\ntwo\n")
        # The recorded steps re-ran in the new sandbox: it holds their files.
        assert sb.read_file("/tmp/log") == b"one\ntwo\n"
        r2 = sb.run("echo three >> /tmp/log; cat /tmp/log", step=2)
        assert r2.replayed is False and r2.stdout == "one\ntwo\nthree\n"
        steps = client.trajectory(T).steps
        assert [(s["step"], s["sandbox_id"]) for s in steps] == [(0, sid), (1, sid), (2, sb.id)], steps
    assert _state(server, sb.id) is None, "releasing the restarted trainer's lease left its sandbox"


def test_a_reused_trajectory_sandbox_follows_the_new_lease(server, leases, image, sandboxes):
    T = u.unique("traj-relet")
    old = leases(ttl_s=600)["id"]
    new = leases(ttl_s=600)["id"]
    sid = _create(server, sandboxes, image, trajectory=T, lease=old)["id"]
    r = server.http("POST", "/v1/sandboxes", {"image": image, "trajectory": T, "lease": new})
    if r.status != 201:                 # refusing the mismatch outright would also be sound
        u.assert_error(r, (400, 409))
        return
    assert r.json["id"] == sid, r
    assert r.json["lease"] == new, f"asked for lease {new}, got a sandbox tied to {r.json['lease']}"
    assert server.http("DELETE", "/v1/leases/" + new).status == 204
    assert _state(server, sid) is None, "releasing the new lease left the sandbox"
