"""The Python SDK against a real server (CONTRACT.md "Python SDK")."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time

import pytest

import warren
import e2e_util as u


@pytest.fixture
def client(server):
    c = server.client()
    yield c
    c.close()


def _gone(client, sid) -> bool:
    try:
        return client.get(sid).state in ("deleted", "stopping")
    except warren.NotFound:
        return True


def test_contract_example_sandbox_part(client, image, sandboxes):
    with client.sandbox(image=image, backend="container", memory_mb=256) as sb:
        sandboxes.append(sb.id)
        assert isinstance(sb, warren.Sandbox)
        assert sb.state == "running" and sb.image == image and sb.memory_mb == 256
        r = sb.run("echo $((6*7))")                                  # str -> shell
        assert isinstance(r, warren.ExecResult)
        assert r.exit_code == 0 and r.stdout == "42\n", r
        r = sb.run(["sh", "-c", "echo $0 $1", "a b", "c"])            # list -> argv
        assert r.exit_code == 0 and r.stdout == "a b c\n", r
        r = sb.run(["echo", "$HOME", "*"])                          # no shell expansion
        assert r.stdout == "$HOME *\n", r
        sb.write_file("/tmp/a.sh", "echo hi")
        data = sb.read_file("/tmp/a.sh")
        assert isinstance(data, bytes) and data == b"echo hi"
        events = list(sb.stream(["sh", "/tmp/a.sh"]))
        assert events and events[-1].result is not None
        assert "".join(e.data for e in events[:-1] if e.stream == "stdout") == "hi\n"
        assert events[-1].result.exit_code == 0
        sid = sb.id
    assert _gone(client, sid), "the sandbox survived the end of the with block"


def test_exec_result_fields(client, image, sandboxes):
    sb = client.create(image=image)
    sandboxes.append(sb.id)
    r = sb.run("echo out; echo err >&2; exit 5")
    assert (r.exit_code, r.stdout, r.stderr) == (5, "out\n", "err\n"), r
    assert r.signal is None and r.timed_out is False and r.replayed is False
    assert r.stdout_truncated is False and r.stderr_truncated is False
    assert isinstance(r.duration_ms, (int, float)) and r.duration_ms >= 0
    assert isinstance(r.exec_id, str) and r.exec_id
    again = sb.exec_result(r.exec_id)
    assert again.exit_code == 5 and again.stdout == "out\n" and again.state == "exited"


def test_run_options(client, image, sandboxes):
    sb = client.create(image=image, env={"FROM_SPEC": "s"})
    sandboxes.append(sb.id)
    r = sb.run("pwd; echo $FROM_SPEC $FROM_EXEC; cat", stdin="in put\n", env={"FROM_EXEC": "e"}, cwd="/tmp")
    assert r.exit_code == 0 and r.stdout == "/tmp\ns e\nin put\n", r
    r = sb.run(["wc", "-c"], stdin=bytes(range(256)))
    assert r.stdout.strip() == "256", r
    t0 = time.time()
    r = sb.run("sleep 20", timeout=1)
    assert r.timed_out is True and r.exit_code == 124, r
    assert time.time() - t0 < 15
    r = sb.run("head -c 100000 /dev/zero | tr '\\0' x", max_output_bytes=1000)
    assert r.stdout_truncated is True and 0 < len(r.stdout) <= 1000, r
    r = sb.run(["sh", "-c", "printf '\\377\\000A'"], binary=True)
    assert r.stdout_bytes == b"\xff\x00A", r


def test_files(client, image, sandboxes):
    sb = client.create(image=image)
    sandboxes.append(sb.id)
    blob = bytes(range(256)) * 1000
    sb.write_file("/root/blob.bin", blob)
    assert sb.read_file("/root/blob.bin") == blob
    sb.write_file("/tmp/run.sh", "#!/bin/sh\necho ran\n", mode=0o755)
    r = sb.run("stat -c %a /tmp/run.sh; /tmp/run.sh")
    assert r.stdout == "755\nran\n", r
    sb.write_file("/tmp/empty", b"")
    assert sb.read_file("/tmp/empty") == b""
    sb.write_file("/tmp/u.txt", "héllo ✓")
    assert sb.read_file("/tmp/u.txt").decode() == "héllo ✓"
    with pytest.raises(warren.NotFound) as ei:
        sb.read_file("/tmp/does-not-exist")
    assert ei.value.code == "not_found" and ei.value.status == 404


def test_stream_events_and_resume(client, image, sandboxes):
    sb = client.create(image=image)
    sandboxes.append(sb.id)
    cmd = "for i in 1 2 3 4 5; do echo line$i; sleep 0.1; done; echo oops >&2; exit 2"
    events = list(sb.stream(cmd))
    body, last = events[:-1], events[-1]
    assert last.result is not None and last.result.exit_code == 2
    assert all(e.result is None for e in body)
    seqs = [e.seq for e in body]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs) and seqs[0] >= 1, seqs
    assert "".join(e.data for e in body if e.stream == "stdout") == "".join(f"line{i}\n" for i in range(1, 6))
    assert "".join(e.data for e in body if e.stream == "stderr") == "oops\n"

    exec_id = last.result.exec_id
    mid = seqs[len(seqs) // 2]
    tail = list(sb.follow(exec_id, after=mid))
    assert [e.seq for e in tail[:-1]] == [s for s in seqs if s > mid]
    assert tail[-1].result is not None and tail[-1].result.exit_code == 2


def test_stream_is_incremental(client, image, sandboxes):
    sb = client.create(image=image)
    sandboxes.append(sb.id)
    t0 = time.time()
    it = sb.stream("echo first; sleep 3; echo second")
    first = next(it)
    assert first.data == "first\n", first
    assert time.time() - t0 < 2.5, "the first line arrived only when the command ended"
    rest = list(it)
    assert rest[-1].result.exit_code == 0
    assert "".join(e.data for e in rest[:-1]) == "second\n"


def test_errors_mapping(server, client, image, sandboxes):
    with pytest.raises(warren.NotFound) as ei:
        client.get("sb-does-not-exist")
    e = ei.value
    assert isinstance(e, warren.WarrenError)
    assert e.code == "not_found" and e.status == 404 and e.message

    with pytest.raises(warren.InvalidRequest) as ei:
        client.create(image=image, no_such_field=1)
    assert ei.value.code == "invalid" and ei.value.status == 400
    assert "no_such_field" in ei.value.message

    with pytest.raises(warren.InvalidRequest) as ei:
        client.create(image="no-such-image:0")
    assert "no-such-image" in ei.value.message

    with pytest.raises(warren.Unauthorized) as ei:
        warren.Client(url=server.url, token="wrong").list()
    assert ei.value.code == "unauthorized" and ei.value.status == 401

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]       # bound, not listening: connection refused
        with pytest.raises(warren.Unavailable):
            warren.Client(url=f"http://127.0.0.1:{port}", token="x").health()

    sb = client.create(image=image)
    sandboxes.append(sb.id)
    sb.delete()
    with pytest.raises(warren.NotFound):
        sb.run("true")
    sb.delete(missing_ok=True)


def test_get_list_refresh(client, image, sandboxes):
    tag = u.unique("sdk")
    a = client.create(image=image, labels={"suite": tag, "n": "a"})
    sandboxes.append(a.id)
    b = client.create(image=image, labels={"suite": tag, "n": "b"})
    sandboxes.append(b.id)
    got = client.get(a.id)
    assert got.id == a.id and got.labels == {"suite": tag, "n": "a"}
    assert {s.id for s in client.list(labels={"suite": tag})} == {a.id, b.id}
    assert [s.id for s in client.list(labels={"suite": tag, "n": "b"})] == [b.id]
    assert {s.id for s in client.list(labels={"suite": tag}, state="running")} == {a.id, b.id}
    assert client.list(labels={"suite": tag}, state="paused") == []
    assert a.refresh().state == "running"


def test_create_many(client, image, sandboxes):
    tag = u.unique("batch")
    sbs = client.create_many(3, image=image, labels={"suite": tag})
    sandboxes.extend(s.id for s in sbs)
    assert len(sbs) == 3 and not sbs.errors, (sbs, sbs.errors)
    assert len({s.id for s in sbs}) == 3
    for i, sb in enumerate(sbs):
        assert sb.run(f"echo {i}").stdout == f"{i}\n"
    assert {s.id for s in client.list(labels={"suite": tag})} == {s.id for s in sbs}


def _cmdline(pid: str) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def test_pause_resume(client, image, sandboxes):
    """Paused means stopped: the kernel reports every process of the sandbox's cgroup frozen
    (cgroup.events), a command that was counting goes on after the resume."""
    sb = client.create(image=image)
    sandboxes.append(sb.id)
    marker = u.unique("pause-marker")
    sb.start(f"i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 0.05; done # {marker}")
    assert u.wait_until(lambda: sb.run("cat /tmp/count").stdout.strip() not in ("", "0"), 10, 0.1)
    # The counting shell, seen from the host, and its cgroup2 directory (a sandbox from the
    # warm pool keeps its pool name there, so it is found by its process, not its id).
    pid = next(p for p in os.listdir("/proc") if p.isdigit() and marker.encode() in _cmdline(p))
    with open(f"/proc/{pid}/cgroup") as f:
        v2 = next(l.split("::", 1)[1].strip() for l in f if l.startswith("0::"))
    root = "/sys/fs/cgroup/unified" if os.path.isdir("/sys/fs/cgroup/unified") else "/sys/fs/cgroup"
    # The commands' cgroup or the sandbox's: the nearest directory with a freezer state.
    d = root + v2
    while not os.path.exists(d + "/cgroup.events") or "frozen" not in open(d + "/cgroup.events").read():
        d = os.path.dirname(d)
    events = [d + "/cgroup.events"]
    paused = sb.pause()
    assert paused.state == "paused"
    assert client.get(sb.id).state == "paused"
    for e in events:
        with open(e) as f:
            assert "frozen 1" in f.read().split("\n"), (e, "not frozen")
    assert sb.resume().state == "running"
    for e in events:
        with open(e) as f:
            assert "frozen 0" in f.read().split("\n"), (e, "still frozen")
    first = int(sb.run("cat /tmp/count").stdout)
    assert u.wait_until(lambda: int(sb.run("cat /tmp/count").stdout) > first, 10, 0.1), "no progress after resume"
    assert sb.run("echo back").stdout == "back\n"


def test_concurrent_threads(client, image, sandboxes):
    sb = client.create(image=image)
    sandboxes.append(sb.id)
    errors = []

    def work(i):
        try:
            for j in range(3):
                r = sb.run(["echo", f"{i}-{j}"])
                assert r.stdout == f"{i}-{j}\n", r
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors


def test_lease_keeps_sandbox_alive_while_renewed(client, image, sandboxes):
    lease = client.lease(ttl=3, renew_every=0.5)
    with lease:
        assert isinstance(lease.id, str) and lease.id
        sb = client.create(image=image, lease=lease)
        sandboxes.append(sb.id)
        assert sb.lease == lease.id
        time.sleep(6)                                   # twice the ttl
        assert client.get(sb.id).state == "running", "a renewed lease let its sandbox go"
        assert lease.error is None, lease.error


def test_lease_expiry_reaps(client, image, sandboxes):
    lease = client.lease(ttl=2, renew_every=3600)   # never renewed
    try:
        sb = client.create(image=image, lease=lease)
        sandboxes.append(sb.id)
        assert u.wait_until(lambda: _gone(client, sb.id), timeout=30, interval=0.5), \
            "a sandbox whose lease expired 30s ago is still there"
    finally:
        lease._stop.set()
        try:
            lease.close()
        except warren.WarrenError:
            pass


def test_health_and_layers(client, image):
    assert client.health().get("ok") is True
    layers = client.layers()
    mine = [l for l in layers if l.name == "t" and l.tag == "1"]
    assert mine, layers
    assert mine[0].digest.startswith("sha256:") and mine[0].size > 0


def test_async_client(server, image, sandboxes):
    async def main():
        ac = warren.AsyncClient(url=server.url, token=server.token)
        async with ac.sandbox(image=image) as sb:
            sandboxes.append(sb.id)
            r = await sb.run("echo async")
            assert r.stdout == "async\n"
            rs = await asyncio.gather(*(sb.run(["echo", str(i)]) for i in range(4)))
            assert [x.stdout for x in rs] == [f"{i}\n" for i in range(4)]
            await sb.write_file("/tmp/x", b"xyz")
            assert await sb.read_file("/tmp/x") == b"xyz"
            evs = [ev async for ev in sb.stream("echo a; echo b")]
            assert "".join(e.data for e in evs[:-1]) == "a\nb\n" and evs[-1].result.exit_code == 0
            sid = sb.id
        with pytest.raises(warren.NotFound):
            await ac.get("sb-does-not-exist")
        await ac.close()
        return sid
    sid = asyncio.run(main())
    assert _gone(server.client(), sid)


def test_set_network_none(client, image, sandboxes):
    sb = client.create(image=image)
    sandboxes.append(sb.id)
    got = sb.set_network(None)
    assert got is sb and sb.network["mode"] == "none", sb.network
    r = sb.run("cat /proc/net/dev")
    assert [l.split(":")[0].strip() for l in r.stdout.splitlines()[2:]] == ["lo"], r.stdout


def test_set_network_egress(client, image, sandboxes):
    sb = client.create(image=image)
    sandboxes.append(sb.id)
    sb.set_network(allow=["pypi.org"])
    assert sb.network == {"mode": "egress", "allow": ["pypi.org"]}, sb.network


def test_push_and_delete_layer(server, client, image, sandboxes):
    import io
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        tf.add(server.rootfs, arcname=".")
    layer = client.push_layer("e2e-sdk", "1", buf.getvalue())
    try:
        assert layer.name == "e2e-sdk" and layer.tag == "1" and layer.digest.startswith("sha256:"), layer
        assert any(l.name == "e2e-sdk" for l in client.layers())
        got = client.inspect_layer("e2e-sdk:1")
        assert got.digest == layer.digest and got.format in ("whole", "chunked"), got
        assert isinstance(got.on_demand, list), got
        with client.sandbox(image="e2e-sdk:1") as sb:
            sandboxes.append(sb.id)
            assert sb.run("cat /etc/marker").stdout == "warren-e2e-rootfs\n"
    finally:
        client.delete_layer("e2e-sdk:1")
    assert not any(l.name == "e2e-sdk" for l in client.layers())
    with pytest.raises(warren.NotFound):
        client.delete_layer("e2e-sdk:1")
    with pytest.raises(warren.NotFound):
        client.inspect_layer("e2e-sdk:1")
