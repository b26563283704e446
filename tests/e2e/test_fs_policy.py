"""The filesystem policy and the tamper report through the CLI and the SDK (issue 23).

The attacks themselves (root trying every way to change a guarded file) are in
tests/security/test_integrity.py; these check the user's surfaces: `warren create
--read-only`, `warren fs`, `warren diff`, `sb.set_filesystem`, `sb.changes`, and that a
restarted `warren serve` keeps enforcing and reporting.
"""

from __future__ import annotations

import json

import pytest

import warren


def _sh(server, sid: str, cmd: str) -> "subprocess.CompletedProcess":
    return server.cli("exec", sid, "--", "sh", "-c", cmd, timeout=60)


def test_cli_create_read_only_fs_and_diff(server, image, sandboxes):
    r = server.cli("create", "--image", image, "--read-only", "/etc", "--writable", "/etc/writable-here")
    assert r.returncode != 0 and "/etc/writable-here" in r.stderr and "does not exist" in r.stderr, r

    r = server.cli("create", "--image", image, "--read-only", "/etc")
    assert r.returncode == 0, r.stderr
    sid = r.stdout.strip().splitlines()[-1]
    sandboxes.append(sid)
    assert server.http("GET", f"/v1/sandboxes/{sid}").json["filesystem"] == {"read_only": ["/etc"], "writable": []}

    r = _sh(server, sid, "echo x > /etc/marker")
    assert r.returncode != 0 and "Operation not permitted" in r.stderr, r
    assert _sh(server, sid, "cat /etc/marker").stdout == "warren-e2e-rootfs\n"
    assert _sh(server, sid, "echo ok > /root/new && echo done").stdout == "done\n"

    r = server.cli("fs", sid)
    assert r.returncode != 0 and "--all-writable" in r.stderr, r
    r = server.cli("fs", sid, "--all-writable")
    assert r.returncode == 0, r.stderr
    assert _sh(server, sid, "echo changed > /etc/marker && rm /etc/hosts && echo done").stdout == "done\n"

    r = server.cli("diff", sid)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["D /etc/hosts  (base " + image + ")",
                                     "M /etc/marker  (base " + image + ")",
                                     "A /root/new"], r.stdout
    r = server.cli("diff", sid, "--path", "/root", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["truncated"] is False
    assert [(c["path"], c["change"], c["type"], c["size"]) for c in doc["changes"]] == [("/root/new", "added", "file", 3)]

    r = server.cli("fs", sid, "--read-only", "etc")
    assert r.returncode != 0 and "absolute" in r.stderr, r


def test_sdk_set_filesystem_and_changes(server, image, sandboxes):
    with server.client() as client:
        sb = client.create(image=image)
        sandboxes.append(sb.id)
        sb.run("mkdir /work && echo task > /work/task")
        sb.set_filesystem(["/"], writable=["/work", "/tmp"])
        assert sb.filesystem == {"read_only": ["/"], "writable": ["/tmp", "/work"]}
        r = sb.run("echo a > /work/a && echo b > /tmp/b && echo done")
        assert r.stdout == "done\n", r
        for cmd in ("echo x > /etc/marker", "mkdir /newdir", "rm /work", "mv /work /w2", "touch /root/x"):
            r = sb.run(cmd)
            assert r.exit_code != 0, (cmd, r)
        changes = {c["path"]: c for c in sb.changes()}
        assert set(changes) == {"/tmp/b", "/work", "/work/a", "/work/task"}, changes
        assert changes["/work"]["change"] == "added" and changes["/work"]["type"] == "dir"
        assert sb.changes("/work/a")[0]["size"] == 2
        with pytest.raises(warren.WarrenError) as e:
            sb.changes(limit=1)
        assert "truncated" in str(e.value)
        sb.set_filesystem()
        assert sb.run("echo x > /etc/marker && echo done").stdout == "done\n"
        m = sb.changes("/etc")
        assert [(c["path"], c["change"], c["layer"]["role"]) for c in m] == [("/etc/marker", "modified", "base")]
        with pytest.raises(warren.InvalidRequest):
            sb.set_filesystem(["/no/such/tree"])
        # A refused policy leaves the one before it in force.
        assert sb.run("echo y > /etc/marker && echo done").stdout == "done\n"


def test_paused_sandbox_takes_a_policy_and_stays_paused(server, image, sandboxes):
    with server.client() as client:
        sb = client.create(image=image)
        sandboxes.append(sb.id)
        sb.pause()
        sb.set_filesystem(["/etc"])
        assert client.get(sb.id).state == "paused"
        sb.resume()
        assert sb.run("echo x > /etc/marker").exit_code != 0


def test_fncall_sandbox_accepts_a_policy_and_never_changes(server, runner, sandboxes):
    with server.client() as client:
        sb = client.create(image=runner, backend="fncall", filesystem={"read_only": ["/usr"]})
        sandboxes.append(sb.id)
        r = sb.run("echo x > /usr/x; echo y > /tmp/y; echo done")
        assert "done" in r.stdout
        assert sb.changes() == []


def test_one_policy_to_another_moves_every_flag(server, image, sandboxes):
    """From one read-only set to another without passing through `{}`: what the first made
    read-only and the second does not is writable again, files and directories alike."""
    with server.client() as client:
        sb = client.create(image=image)
        sandboxes.append(sb.id)
        sb.run("echo a > /etc/new-in-etc; mkdir -p /root/d && echo b > /root/d/f")
        sb.set_filesystem(["/etc"])
        assert sb.run("echo x > /etc/new-in-etc").exit_code != 0
        sb.set_filesystem(["/root"])
        r = sb.run("echo x > /etc/new-in-etc && touch /etc/another && echo done")
        assert r.stdout == "done\n", r
        for cmd in ("echo y > /root/d/f", "touch /root/d/g", "rm /root/d/f"):
            assert sb.run(cmd).exit_code != 0, cmd
        sb.set_filesystem(["/"], writable=["/root/d"])
        assert sb.run("echo y > /root/d/f && touch /root/d/g && echo done").stdout == "done\n"
        assert sb.run("echo z > /etc/new-in-etc").exit_code != 0
        assert sb.run("cat /etc/new-in-etc /root/d/f").stdout == "x\ny\n"


def _hold(sb, cmd: str, ready: str) -> str:
    """Starts `cmd` (which creates `ready` once it holds what it holds) and waits for it."""
    import e2e_util as u
    eid = sb.start(cmd)
    assert u.wait_until(lambda: sb.run(f"test -e {ready}").exit_code == 0, 30, 0.1), cmd
    return eid


def test_review_findings_hold(server, image, sandboxes):
    """Regressions of a security review: a writer of a file whose name is not UTF-8 is severed
    like any other; a hard link made before cannot carry writes into a read-only tree; a read-
    only path that resolves off the overlay (to /dev/shm) is refused; an endless chain of
    directories is refused cleanly, and every refusal leaves the policy before it in force."""
    with server.client() as client:
        sb = client.create(image=image, disk_mb=64)
        sandboxes.append(sb.id)
        sb.run("mkdir -p /work /keep && echo orig > /work/f && echo k > /keep/k && ln /work/f /tmp/zz && "
               "mkdir /dev/shm/t && ln -s /dev/shm/t /work/shm")
        _hold(sb, "f=$(printf 'name\\377'); exec 3<> \"/work/$f\"; touch /tmp/held; sleep 600", "/tmp/held")
        sb.set_filesystem(["/work", "/keep"])
        assert sb.run("echo hacked > /tmp/zz; cat /work/f").stdout == "orig\n"
        assert sb.run("echo x > /work/f").exit_code != 0
        assert sb.run("echo x > /keep/k").exit_code != 0
        with pytest.raises(warren.InvalidRequest) as e:
            sb.set_filesystem(["/work/shm"])
        assert "root filesystem" in str(e.value)
        sb.run("mkdir -p /deep && cd /deep && i=0; while [ $i -lt 600 ]; do mkdir d && cd d; i=$((i+1)); done")
        with pytest.raises(warren.InvalidRequest) as e:
            sb.set_filesystem(["/work"])
        assert "deeper" in str(e.value)
        # Both refusals changed nothing: /work and /keep are read-only still.
        assert client.get(sb.id).filesystem == {"read_only": ["/keep", "/work"], "writable": []}
        for cmd in ("echo x > /work/f", "touch /work/new", "echo x > /keep/k", "touch /keep/new"):
            assert sb.run(cmd).exit_code != 0, cmd


def test_a_change_that_fails_midway_leaves_the_policy_before_it(server, image, sandboxes):
    """A writer the node cannot sever (a sparse file larger than the sandbox's free disk, so
    its copy runs out of space) fails the change after the flags came off the directories:
    they are put back before the sandbox runs again, and the policy before stays."""
    with server.client() as client:
        sb = client.create(image=image, disk_mb=16)
        sandboxes.append(sb.id)
        sb.run("mkdir -p /big /keep && echo k > /keep/k && truncate -s 100M /big/sparse")
        sb.set_filesystem(["/keep"])
        _hold(sb, "exec 3<> /big/sparse; touch /tmp/held; sleep 600", "/tmp/held")
        with pytest.raises(warren.WarrenError) as e:
            sb.set_filesystem(["/keep", "/big"])
        assert e.value.status == 500 and "request" in e.value.message, e.value
        assert client.get(sb.id).filesystem == {"read_only": ["/keep"], "writable": []}
        for cmd in ("echo x > /keep/k", "touch /keep/new", "rm /keep/k"):
            assert sb.run(cmd).exit_code != 0, cmd
        assert sb.run("echo y > /big/other && echo done").stdout == "done\n"
