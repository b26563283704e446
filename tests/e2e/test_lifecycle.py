"""Lifecycle pieces of the walking skeleton: TTL reaping, restart reconciliation."""
import time

import warren


def test_ttl_expired_sandbox_is_reaped(server, image, sandboxes):
    c = server.client()
    sb = c.create(image=image, ttl_s=1)
    sandboxes.append(sb.id)
    keep = c.create(image=image, ttl_s=600)
    sandboxes.append(keep.id)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            c.get(sb.id)
        except warren.NotFound:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"sandbox {sb.id} outlived its ttl_s=1 by 9 s")
    # The reaper only takes what is due.
    assert c.get(keep.id).state == "running"
    assert keep.run("echo alive").stdout == "alive\n"


def test_network_allow_without_egress_is_refused(server, image):
    r = server.http("POST", "/v1/sandboxes",
                    {"image": image, "network": {"mode": "none", "allow": ["pypi.org"]}})
    assert r.status == 400 and r.json["error"]["code"] == "invalid"
