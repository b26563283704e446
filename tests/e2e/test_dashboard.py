"""The dashboard at /ui, in a real browser: Debian's headless Chromium driven by puppeteer-core
(tests/ui/dashboard.mjs, pinned in tests/ui/package-lock.json). The test makes sandboxes with
labels, a call, a trajectory with a replayed step and a long exec, then the browser logs in with
a token and checks every page shows them (with no console or page error), follows the exec's
output while it runs, and shows a token without `sandbox:read` a refusal instead of the list.
Screenshots of each page are saved under $WARREN_E2E_ARTIFACTS (default
/var/tmp/warren-e2e-artifacts)/dashboard."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.parse
from pathlib import Path

import pytest

import e2e_util as u

HERE = Path(__file__).resolve().parent
UI_DIR = HERE.parent / "ui"
ARTIFACTS = Path(os.environ.get("WARREN_E2E_ARTIFACTS", "/var/tmp/warren-e2e-artifacts")) / "dashboard"


def _requirements() -> tuple[str, str]:
    node, chromium = shutil.which("node"), shutil.which("chromium")
    if not node or not chromium:
        pytest.fail("the dashboard tests need node and Debian's chromium (scripts/install-deps.sh)")
    if not (UI_DIR / "node_modules" / "puppeteer-core" / "package.json").exists():
        pytest.fail("tests/ui/node_modules is missing: run `npm ci --prefix tests/ui` "
                    "(scripts/install-deps.sh does)")
    return node, chromium


def test_dashboard_pages_in_chromium(server, image, runner, sandboxes, tokens, tmp_path):
    node, chromium = _requirements()
    assert server.http("GET", "/ui").status == 200
    page = server.http("GET", "/ui/app.js")
    assert page.status == 200 and "default-src 'self'" in page.headers.get("Content-Security-Policy", "")
    assert server.http("GET", "/ui/nothing.js").status == 404

    client = server.client()
    job = u.unique("job")
    made = []
    for i in range(3):
        sb = client.create({"image": image, "labels": {"job": job, "n": str(i)}})
        sandboxes.append(sb.id)
        made.append({"id": sb.id, "label": f"n={i}"})
    # A live exec: two lines a second for a minute, so the browser follows it while it runs.
    lines = [f"line-{i}" for i in range(120)]
    exec_id = client.get(made[0]["id"]).start(
        ["sh", "-c", "i=0; while [ $i -lt 120 ]; do echo line-$i; i=$((i+1)); sleep 0.5; done"],
        timeout=300)
    # A trajectory of two steps, the first replayed in a second sandbox.
    traj = u.unique("traj")
    first = server.http("POST", "/v1/sandboxes", {"image": image, "trajectory": traj}).json["id"]
    sandboxes.append(first)
    for step, cmd in enumerate(["echo one > /tmp/log", "cat /tmp/log"]):
        r = server.http("POST", f"/v1/sandboxes/{first}/exec", {"cmd": cmd, "step": step})
        assert r.status == 200, r
    # The first sandbox goes; a second of the same trajectory replays the recorded steps,
    # re-running them there (each step then notes the re-run).
    assert server.http("DELETE", "/v1/sandboxes/" + first).status == 204
    second = server.http("POST", "/v1/sandboxes", {"image": image, "trajectory": traj}).json["id"]
    sandboxes.append(second)
    for step, cmd in enumerate(["echo one > /tmp/log", "cat /tmp/log"]):
        r = server.http("POST", f"/v1/sandboxes/{second}/exec", {"cmd": cmd, "step": step})
        assert r.status == 200 and r.json["replayed"], r
    steps = server.http("GET", "/v1/trajectories/" + traj).json["steps"]
    assert len(steps) == 2 and steps[0].get("reruns"), steps
    # A call, so fncall has a verdict to count.
    assert client.call("python", "print(1)").stdout.strip() == "1"
    _, narrow = tokens(scopes=["image:read"])

    # What the pages read, through the API: a page of the job's sandboxes at a time with the
    # number that match, the exec history, the hour of samples and the calls' verdicts.
    page1 = server.http("GET", f"/v1/sandboxes?label=job={job}&limit=2").json
    assert [s["id"] for s in page1["sandboxes"]] == [m["id"] for m in made[:2]], page1
    assert page1["total"] == 3 and page1["next_page_token"], page1
    page2 = server.http("GET", f"/v1/sandboxes?label=job={job}&limit=2&page_token="
                        + urllib.parse.quote(page1["next_page_token"])).json
    assert [s["id"] for s in page2["sandboxes"]] == [made[2]["id"]] and "next_page_token" not in page2
    assert server.http("GET", "/v1/sandboxes?limit=0").status == 400
    by_image = server.http("GET", "/v1/sandboxes?" + urllib.parse.urlencode(
        {"image": image, "label": f"job={job}", "backend": "container", "limit": 1})).json
    assert by_image["total"] == 3, by_image
    history = server.http("GET", f"/v1/sandboxes/{made[0]['id']}/execs").json["execs"]
    assert [(e["exec_id"], e["state"]) for e in history][-1] == (exec_id, "running"), history
    assert history[-1]["argv"][0] == "sh" and history[-1]["exit_code"] is None, history
    stats = server.http("GET", "/v1/stats").json
    assert stats["interval_s"] == 10 and stats["history"][-1]["creates"] >= 4, stats["history"][-1]
    assert stats["calls"]["verdicts"].get("ok", 0) >= 1, stats["calls"]

    plan = {"url": server.url, "token": server.token, "narrow_token": narrow,
            "screenshots": str(ARTIFACTS), "chromium": chromium,
            "sandboxes": made, "job": job, "image": image.split(":")[0], "image_ref": image,
            "exec": {"sandbox": made[0]["id"], "id": exec_id, "lines": lines},
            "trajectory": {"id": traj, "steps": 2}}
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan))
    run = subprocess.run([node, str(UI_DIR / "dashboard.mjs"), str(plan_file)], capture_output=True,
                         text=True, timeout=600, cwd=UI_DIR)
    out = run.stdout.strip().splitlines()
    result = json.loads(out[-1]) if out and out[-1].startswith("{") else {"failures": [run.stderr[-3000:]]}
    assert run.returncode == 0 and not result["failures"], json.dumps(result, indent=1)
    assert sorted(p.name for p in ARTIFACTS.glob("*.png"))[:1] == ["00-login.png"]
