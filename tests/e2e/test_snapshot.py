"""Snapshot and fork (issue 30) through the API, the SDK and the CLI.

A snapshot is the sandbox's files as one workspace layer: a sandbox made from it shows the
same tree, byte for byte and metadata for metadata (compared by a manifest each sandbox
writes of itself: type, mode, owner, mtime, xattrs, content digest, symlink target, which
names share an inode). A fork is N sandboxes from one snapshot, all or none; a microVM's
fork also carries its memory and running processes.
"""

from __future__ import annotations

import hashlib
import json
import os
import time

import pytest

import e2e_util
import warren

# What a sandbox writes of its own tree. /proc, /sys, /dev, /run and /tmp are mounts or a
# sandbox's own; `-B`: no bytecode written while it looks.
MANIFEST = r'''
import hashlib, json, os, stat, sys
skip = {"/proc", "/sys", "/dev", "/run", "/tmp"}
out, first_name = {}, {}
def walk(d):
    for name in sorted(os.listdir(d)):
        p = os.path.join(d, name)
        if p in skip:
            continue
        st = os.lstat(p)
        e = {"mode": oct(st.st_mode), "uid": st.st_uid, "gid": st.st_gid}
        xs = os.listxattr(p, follow_symlinks=False)
        if xs:
            e["xattrs"] = {x: os.getxattr(p, x, follow_symlinks=False).hex() for x in sorted(xs)}
        if not stat.S_ISDIR(st.st_mode):
            e["mtime"] = st.st_mtime_ns  # a directory's changes as its entries are made
        if stat.S_ISREG(st.st_mode):
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            e["sha256"], e["size"] = h.hexdigest(), st.st_size
            first_name.setdefault((st.st_dev, st.st_ino), []).append(p)
        elif stat.S_ISLNK(st.st_mode):
            e["target"] = os.readlink(p)
        elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
            e["rdev"] = st.st_rdev
        out[p] = e
        if stat.S_ISDIR(st.st_mode):
            walk(p)
walk("/")
# Names seen to share an inode (st_nlink is no guide: an overlay shows a lower file's).
for names in first_name.values():
    if len(names) > 1:
        for p in names:
            out[p]["same_as"] = names[0]
json.dump(out, sys.stdout, sort_keys=True)
'''

# A package built and installed with dpkg, and every kind of change an overlay records.
CHANGES = r'''
set -e
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mkdir -p /tmp/pkg/DEBIAN /tmp/pkg/usr/bin /tmp/pkg/usr/share/warren-snap
printf 'Package: warren-snap\nVersion: 1.0\nArchitecture: all\nMaintainer: e2e <e2e@example.invalid>\nDescription: snapshot test\n' > /tmp/pkg/DEBIAN/control
printf '#!/bin/sh\necho snap-ok\n' > /tmp/pkg/usr/bin/warren-snap
chmod 755 /tmp/pkg/usr/bin/warren-snap
head -c 300000 /dev/urandom > /tmp/pkg/usr/share/warren-snap/blob
dpkg-deb --build /tmp/pkg /tmp/warren-snap.deb >/dev/null
dpkg -i /tmp/warren-snap.deb >/dev/null
echo edited >> /etc/issue
rm /etc/debian_version
mv /etc/skel /etc/skel-moved
mv /etc/issue.net /root/issue.net.moved
echo data > /root/a
ln /root/a /root/a-link
ln /etc/passwd /root/passwd-link
python3 -c 'import os; os.setxattr("/root/a", "user.note", b"hello"); os.setxattr("/etc/issue", "user.edited", b"1")'
rm /etc/motd && mkdir /etc/motd && echo inside > /etc/motd/file
rm -rf /etc/default && mkdir /etc/default && echo fresh > /etc/default/only
rm -rf /etc/apt/apt.conf.d && echo now-a-file > /etc/apt/apt.conf.d
chown 1000:1000 /root/a
chmod 4755 /usr/bin/warren-snap
ln -s ../etc/passwd /root/sym
mkfifo /root/fifo
touch -d '2001-02-03 04:05:06' /root/old
echo done
'''


def _manifest(sb) -> dict:
    r = sb.run(["python3", "-B", "-c", MANIFEST], timeout=300, max_output_bytes=64 << 20)
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def _run(sb, cmd: str) -> str:
    r = sb.run(["sh", "-c", cmd], timeout=300)
    assert r.exit_code == 0, (cmd, r.stdout, r.stderr)
    return r.stdout


def _diff(a: dict, b: dict) -> list:
    return [(p, a.get(p), b.get(p)) for p in sorted(set(a) | set(b)) if a.get(p) != b.get(p)][:20]


def test_a_snapshot_shows_the_same_tree_and_stacks(server, runner, sandboxes):
    tag, tag2 = e2e_util.unique("snap") + ":1", e2e_util.unique("snap") + ":2"
    with server.client() as client:
        parent = client.create(image=runner)
        sandboxes.append(parent.id)
        assert _run(parent, CHANGES) == "done\n"
        before = _manifest(parent)
        assert before["/usr/bin/warren-snap"]["mode"] == oct(0o104755)
        assert before["/root/a"]["xattrs"] == {"user.note": b"hello".hex()}
        assert before["/root/a-link"]["same_as"] == "/root/a"

        layer = parent.snapshot(tag)
        assert layer.kind == "workspace" and layer.digest.startswith("sha256:")
        assert layer.snapshot["sandbox"] == parent.id and layer.snapshot["whiteouts"] >= 3
        # The parent runs on, unchanged and not frozen.
        assert _run(parent, "echo alive") == "alive\n"
        assert _manifest(parent) == before

        child = client.create(image=runner, workspace=tag)
        sandboxes.append(child.id)
        got = _manifest(child)
        # One thing the parent shows wrongly: a second name of a file its image had.
        # Overlayfs without its inode index gives the copied-up file its lower inode number
        # and the new name the upper's, so the parent sees two inodes; the snapshot holds one
        # file with two names, as the parent made it.
        expected = dict(before)
        for name in ("/etc/passwd", "/root/passwd-link"):
            expected[name] = dict(before[name], same_as="/etc/passwd")
        assert got == expected, _diff(expected, got)
        assert _run(child, "warren-snap && dpkg -s warren-snap | grep Status") == \
            "snap-ok\nStatus: install ok installed\n"
        # The same tree gives the same layer.
        assert parent.snapshot(tag + "-again").digest == layer.digest

        # A snapshot of a sandbox made from a snapshot stacks: deletions of what the first
        # snapshot holds are kept.
        _run(child, "rm /root/a-link /etc/motd/file && rmdir /etc/motd && echo more > /root/b && "
                    "rm -rf /usr/share/warren-snap && mkdir /usr/share/warren-snap && "
                    "echo new > /usr/share/warren-snap/note")
        after = _manifest(child)
        assert "/etc/motd" not in after and "/root/a-link" not in after
        child.snapshot(tag2)
        grandchild = client.create(image=runner, workspace=tag2)
        sandboxes.append(grandchild.id)
        got = _manifest(grandchild)
        assert got == after, _diff(after, got)

        # What changed is a change report's business too: the grandchild has changed nothing.
        assert [c for c in grandchild.changes() if c["path"] not in ("/proc", "/sys", "/dev", "/tmp")] == []


def test_fork_with_files_lineage_and_isolation(server, runner, sandboxes):
    with server.client() as client:
        parent = client.create(image=runner, labels={"fork": "lineage"})
        sandboxes.append(parent.id)
        _run(parent, "echo parent-state > /root/state && rm /etc/debian_version")
        before = _manifest(parent)
        children = parent.fork(3)
        sandboxes.extend(c.id for c in children)
        assert len({c.id for c in children}) == 3
        for c in children:
            assert c.state == "running" and c.labels == {"fork": "lineage"}
            assert c.lineage["parent"] == parent.id
            assert c.lineage["snapshot"]["digest"] == children[0].lineage["snapshot"]["digest"]
            got = _manifest(c)
            assert got == before, _diff(before, got)
            # Its own identity.
            assert _run(c, "hostname") == c.id + "\n"
        # A change in one is seen by no other, nor by the parent; the parent's after the fork
        # by no child.
        _run(children[0], "echo mine > /root/state")
        _run(parent, "echo later > /root/later")
        assert _run(children[1], "cat /root/state; ls /root/later 2>/dev/null || echo none") == \
            "parent-state\nnone\n"
        assert _run(parent, "cat /root/state") == "parent-state\n"
        # Lineage in inspect, and the parent's children listed.
        r = server.cli("inspect", children[2].id)
        assert r.returncode == 0 and json.loads(r.stdout)["lineage"]["parent"] == parent.id, r
        assert {s.id for s in client.list(parent=parent.id)} == {c.id for c in children}


@pytest.mark.serve_only("counts one node's sandboxes, uid slots and cgroups")
def test_fork_of_100_and_clean_up(server, image, sandboxes):
    before = e2e_util.node_usage(server)
    seen = []
    with server.client() as client:
        parent = client.create(image=image, memory_mb=64)
        sandboxes.append(parent.id)
        _run(parent, "echo from-parent > /root/state && rm /etc/marker")
        children = parent.fork(100, progress=lambda ready, n: seen.append((ready, n)))
        ids = [c.id for c in children]
        try:
            assert len(set(ids)) == 100
            assert seen and seen[-1] == (100, 100) and all(n == 100 for _, n in seen)
            for c in children:
                assert _run(c, "cat /root/state; ls /etc/marker 2>/dev/null || echo gone") == \
                    "from-parent\ngone\n"
            _run(children[0], "echo changed > /root/state")
            for c in (children[1], children[99], parent):
                assert _run(c, "cat /root/state") == "from-parent\n"
        finally:
            codes = [server.http("DELETE", "/v1/sandboxes/" + i, timeout=120).status for i in ids]
        assert set(codes) == {204}
        assert client.list(parent=parent.id) == []
        parent.delete()
    assert e2e_util.node_usage(server) == before


def test_fork_and_snapshot_refuse_cleanly(server, image, runner, sandboxes, tokens):
    name, secret = tokens(scopes=["sandbox:*", "exec"], max_sandboxes=3)
    with warren.Client(url=server.url, token=secret) as mine:
        parent = mine.create(image=image)
        sandboxes.append(parent.id)
        # Beyond the quota: nothing is made, not even a snapshot.
        with pytest.raises(warren.errors.QuotaExceeded) as e:
            parent.fork(5)
        assert "fork of 5" in str(e.value)
        assert mine.list(parent=parent.id) == [] and len(mine.list()) == 1
        # Naming a layer needs image:write.
        with pytest.raises(warren.errors.WarrenError) as e:
            parent.snapshot(e2e_util.unique("snap") + ":1")
        assert e.value.status == 403
        # Paused: resume first.
        parent.pause()
        r = server.http("POST", f"/v1/sandboxes/{parent.id}/fork", {"count": 1}, token=secret)
        e2e_util.assert_error(r, 409, "conflict")
        assert "resume" in r.json["error"]["message"]
        parent.resume()
    # Another tenant's sandbox does not exist for it.
    r = server.http("POST", f"/v1/sandboxes/{parent.id}/fork", {"count": 1})
    assert r.status == 201, r  # the admin sees everything
    sandboxes.extend(s["id"] for s in r.json["sandboxes"])
    other, other_secret = tokens(scopes=["sandbox:*", "image:*", "exec"])
    r = server.http("POST", f"/v1/sandboxes/{parent.id}/fork", {"count": 1}, token=other_secret)
    e2e_util.assert_error(r, 404, "not_found")
    for bad in ({"count": 0}, {"count": 1001}, {"count": 1, "spec": {}}, {}):
        e2e_util.assert_error(server.http("POST", f"/v1/sandboxes/{parent.id}/fork", bad), 400)

    # A snapshot bigger than its bound: a clear error; no layer, and the sandbox runs on.
    with server.client() as client:
        sb = client.create(image=runner)
        sandboxes.append(sb.id)
        _run(sb, "head -c 3000000 /dev/urandom > /root/big")
        tag = e2e_util.unique("snap") + ":big"
        with pytest.raises(warren.errors.QuotaExceeded) as e:
            sb.snapshot(tag, max_mb=2)
        assert "2 MiB" in str(e.value) and "/root/big" in str(e.value)
        assert tag not in {f'{l.name}:{l.tag}' for l in client.layers()}
        assert _run(sb, "echo alive") == "alive\n"
        e2e_util.assert_error(server.http("POST", f"/v1/sandboxes/{sb.id}/snapshot", {"tag": "x"}), 400)


def test_cli_snapshot_and_fork(server, image, sandboxes):
    r = server.cli("create", "--image", image)
    assert r.returncode == 0, r.stderr
    sid = r.stdout.strip().splitlines()[-1]
    sandboxes.append(sid)
    assert server.cli("exec", sid, "--", "sh", "-c", "echo cli > /root/f").returncode == 0
    tag = e2e_util.unique("snap") + ":cli"
    r = server.cli("snapshot", sid, "--tag", tag)
    assert r.returncode == 0, r.stderr
    ref, digest = r.stdout.split()
    assert ref == tag and digest.startswith("sha256:")
    r = server.cli("fork", sid, "-n", "2", "--tag", tag + "2")
    assert r.returncode == 0, r.stderr
    kids = r.stdout.split()
    sandboxes.extend(kids)
    assert len(kids) == 2
    for k in kids:
        assert server.cli("exec", k, "--", "cat", "/root/f").stdout == "cli\n"
        doc = json.loads(server.cli("inspect", k).stdout)
        assert doc["lineage"] == {"parent": sid, "memory": False,
                                  "snapshot": {"ref": tag + "2", "digest": digest}}
    r = server.cli("snapshot", sid)
    assert r.returncode != 0 and "--tag" in r.stderr


# The same manifest with busybox alone (the test image has no python): path, type, mode,
# owner, mtime (not for directories) and content digest, one line each.
BB_MANIFEST = r'''
cd / && find . -xdev \( -path ./proc -o -path ./sys -o -path ./dev -o -path ./run -o -path ./tmp \) -prune -o -print |
sort | while read -r f; do
  if [ -f "$f" ] && [ ! -L "$f" ]; then s=$(md5sum < "$f" | cut -c1-32); else s=-; fi
  if [ -d "$f" ] && [ ! -L "$f" ]; then t=-; else t=$(stat -c %Y "$f"); fi
  if [ -L "$f" ]; then l=$(readlink "$f"); else l=-; fi
  stat -c "%n|%F|%a|%u|%g|$t|$s|$l" "$f"
done
'''

MICROVM = dict(backend="microvm", memory_mb=256, cpu=2, disk_mb=64, pids=64)


def _bb_manifest(sb) -> list:
    return _run(sb, BB_MANIFEST).splitlines()


def test_a_microvm_snapshot_and_fork(server, image, sandboxes):
    tag = e2e_util.unique("snap") + ":vm"
    with server.client() as client:
        vm = client.create(image=image, **MICROVM)
        sandboxes.append(vm.id)
        # A directory where an image's file was: the guest's overlay marks it opaque (in
        # trusted.* xattrs: its kernel's tmpfs has no user.* ones).
        _run(vm, "rm /etc/marker && mkdir -p /root/d && echo data > /root/d/f && ln /root/d/f /root/d/g && "
                 "mv /etc/hosts /root/hosts && rm /etc/hostname && mkdir /etc/hostname && "
                 "echo in > /etc/hostname/in && chown 1000:1000 /root/d/f && chmod 4750 /root/d/f && "
                 "ln -s ../etc/passwd /root/sym && mkfifo /root/fifo && echo .wh.x > /root/.wh.x && "
                 "rm -rf /home && mkdir /home && echo h > /home/new")
        before = _bb_manifest(vm)
        assert any(line.startswith("./root/d/f|regular file|4750|1000|1000|") for line in before), before
        layer = vm.snapshot(tag)
        assert layer.snapshot["whiteouts"] == 2, layer  # /etc/marker and /etc/hosts
        assert _run(vm, "echo alive") == "alive\n"
        # A microVM made from it shows the same tree; so does a container: a layer is a layer.
        child = client.create(image=image, workspace=tag, **MICROVM)
        sandboxes.append(child.id)
        assert _bb_manifest(child) == before
        box = client.create(image=image, workspace=tag)
        sandboxes.append(box.id)
        assert _run(box, "cat /root/d/g /etc/hostname/in /root/.wh.x; ls /etc/marker 2>&1 || true") == \
            "data\nin\n.wh.x\nls: /etc/marker: No such file or directory\n"
        # A fork of a microVM: its files, in new microVMs.
        kids = vm.fork(2)
        sandboxes.extend(k.id for k in kids)
        for k in kids:
            assert k.backend == "microvm" and k.lineage["parent"] == vm.id
            assert _bb_manifest(k) == before
        # Paused: its agent cannot answer.
        vm.pause()
        with pytest.raises(warren.errors.Conflict):
            vm.snapshot(tag + "-paused")
        vm.resume()


def _count(sb) -> int:
    out = _run(sb, "cat /tmp/c 2>/dev/null || echo 0").strip()
    return int(out or 0)


def _microvm_info(server) -> dict:
    return server.http("GET", "/v1/nodes").json["nodes"][0].get("microvm", {})


def _run_dir_entries(server, prefix: str) -> list:
    parent = "warren-" + hashlib.sha256(os.path.realpath(server.data_dir).encode()).hexdigest()[:8]
    d = os.path.join("/run/warren", parent)
    return [e for e in os.listdir(d) if e.startswith(prefix)] if os.path.isdir(d) else []


@pytest.mark.serve_only("the cluster target's nodes run with --no-microvm (VMs are tested on serve)")
def test_a_microvm_fork_carries_its_processes(server, image, sandboxes):
    """A microVM forks with its memory: a process counting in the parent counts on in each child
    from where the parent was, with the parent's pid; each child has its own hostname, clock and
    randomness, and what one child does is seen by no other. The capture leaves nothing behind."""
    loop = "echo $$ > /tmp/pid; i=0; while :; do i=$((i+1)); echo $i > /tmp/c; echo $i; sleep 0.1; done"
    with server.client() as client:
        vm = client.create(image=image, **MICROVM)
        sandboxes.append(vm.id)
        eid = vm.start(["sh", "-c", loop], timeout=900)
        assert e2e_util.wait_until(lambda: _count(vm) >= 10, timeout=60, interval=0.3), _count(vm)
        before = _count(vm)
        pid = _run(vm, "cat /tmp/pid").strip()
        forks = _microvm_info(server).get("forks", 0)
        kids = vm.fork(2)
        sandboxes.extend(k.id for k in kids)
        assert _microvm_info(server)["forks"] == forks + 1
        seeds = set()
        for k in kids:
            assert k.backend == "microvm" and k.lineage == {"parent": vm.id, "memory": True}, k.lineage
            first = _count(k)
            assert first >= before, (first, before)  # carried on, not started again
            assert _run(k, "cat /tmp/pid; kill -0 $(cat /tmp/pid) && echo alive").split() == [pid, "alive"]
            assert e2e_util.wait_until(lambda: _count(k) > first, timeout=30, interval=0.3)
            assert _run(k, "hostname").strip() == k.id
            assert abs(int(_run(k, "date +%s")) - time.time()) < 10
            seeds.add(_run(k, "head -c 16 /dev/urandom | od -An -tx1"))
            # The parent's command is the child's too: its record goes on from the parent's
            # output, without a gap.
            res = k.exec_result(eid)
            assert res.state == "running", res.__dict__
            lines = [int(x) for x in res.stdout.split()]
            assert lines[:3] == [1, 2, 3] and lines == list(range(1, len(lines) + 1)), lines[-5:]
            assert len(lines) > before
        assert len(seeds) == 2
        # Ended in one child through the API: there only.
        kids[1].signal(eid, "KILL")
        assert e2e_util.wait_until(lambda: kids[1].exec_result(eid).state != "running", timeout=30)
        assert kids[1].exec_result(eid).signal == "KILL"
        assert kids[0].exec_result(eid).state == "running"
        assert vm.exec_result(eid).state == "running"
        # Each its own: a file one child writes and a process it ends are its alone.
        _run(kids[0], "echo mine > /tmp/only-here; kill $(cat /tmp/pid)")
        time.sleep(1.0)
        stopped = _count(kids[0])
        time.sleep(1.0)
        assert _count(kids[0]) == stopped
        assert _run(kids[1], "ls /tmp/only-here 2>&1 || true").startswith("ls:")
        now = _count(vm)
        assert e2e_util.wait_until(lambda: _count(vm) > now, timeout=30, interval=0.3)
        assert _run(vm, "ls /tmp/only-here 2>&1 || true").startswith("ls:")
        assert _run(vm, "hostname").strip() == vm.id
        # The capture's QEMU, cgroup and sockets are gone; the children delete cleanly.
        assert _run_dir_entries(server, "fork-") == []
        for k in kids:
            k.delete()
            sandboxes.remove(k.id)
            assert not _run_dir_entries(server, k.id)
