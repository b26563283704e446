#!/usr/bin/env python3
"""Warren demo: an agent-training-shaped batch of rollouts.

Every rollout gets a fresh sandbox made of three layers -- a Debian Python base, a workspace
holding a small repository with a test suite (/work/repo), and a grader tool
(/opt/tools/grader) -- writes one candidate solution (what a policy would sample), runs the
test suite through the grader and turns the result into a reward. Results come back as a
table with timings; nothing is left behind.

Uses the Python SDK against a running `warren serve` (WARREN_URL / WARREN_TOKEN or the
defaults); scripts/demo.sh builds the three layers first.

  python3 examples/demo.py --base demo-py:bookworm --workspace demo-repo:1 \
      --tool demo-grader:1 --count 32 --workers 4
"""
import argparse
import concurrent.futures as cf
import json
import os
import statistics
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sdk", "python"))
import warren  # noqa: E402

# What a policy might produce for the task "implement textstats/solution.py": one right
# answer, several partly wrong ones, one that gives up and one that never finishes.
CANDIDATES = {
    "correct": '''
import re
from collections import Counter
def word_count(text):
    return len(text.split())
def top_words(text, n):
    c = Counter(re.findall(r"[a-z0-9']+", text.lower()))
    return sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
def is_palindrome(s):
    t = [ch for ch in s.lower() if ch.isalnum()]
    return t == t[::-1]
''',
    "split-on-space": '''
import re
from collections import Counter
def word_count(text):
    return len([w for w in text.split(" ") if w])
def top_words(text, n):
    c = Counter(re.findall(r"[a-z0-9']+", text.lower()))
    return sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
def is_palindrome(s):
    t = [ch for ch in s.lower() if ch.isalnum()]
    return t == t[::-1]
''',
    "case-sensitive": '''
import re
from collections import Counter
def word_count(text):
    return len(text.split())
def top_words(text, n):
    return Counter(re.findall(r"\\w+", text)).most_common(n)
def is_palindrome(s):
    return s == s[::-1]
''',
    "gives-up": '''
def word_count(text):
    return 0
def top_words(text, n):
    return []
def is_palindrome(s):
    raise NotImplementedError
''',
    "never-halts": '''
def word_count(text):
    while True:
        pass
top_words = is_palindrome = word_count
''',
}
NAMES = list(CANDIDATES)


def rollout(client, args, k):
    name = NAMES[k % len(NAMES)]
    t0 = time.monotonic()
    with client.sandbox(image=args.base, workspace=args.workspace, tools=[args.tool],
                        memory_mb=512, labels={"demo": args.label}) as sb:
        t_created = time.monotonic()
        sb.write_file("/work/repo/textstats/solution.py", CANDIDATES[name])
        r = sb.run(["/opt/tools/grader/bin/grade", "/work/repo"], timeout=args.test_timeout)
        t_done = time.monotonic()
        grade = {"passed": 0, "total": 0}
        if r.exit_code == 0:
            try:
                grade = json.loads(r.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                pass
        return {
            "k": k, "id": sb.id, "node": sb.to_dict().get("node", ""), "candidate": name,
            "timed_out": r.timed_out,
            "passed": grade.get("passed", 0), "total": grade.get("total", 0),
            "reward": grade["passed"] / grade["total"] if grade.get("total") else 0.0,
            "create_ms": (t_created - t0) * 1000, "test_ms": (t_done - t_created) * 1000,
        }


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else 0.0


PALINDROME_CASES = [("abba", "True"), ("abc", "False"), ("Never odd or even", "True"), ("", "True")]


def judge_with_calls(client, image):
    """Judges each candidate's is_palindrome through POST /v1/calls; True if the verdicts are
    the expected ones."""
    cases = [{"stdin": text + "\n", "expected": want + "\n"} for text, want in PALINDROME_CASES]
    print("\njudged by fncall (one call per candidate, each case in a fresh worker):")
    ok = True
    t0 = time.monotonic()
    for name, src in CANDIDATES.items():
        code = src + "\nprint(is_palindrome(input()))\n"
        res = client.call(language="python", code=code, cases=cases, image=image, timeout_s=1)
        verdicts = [c["verdict"] for c in res.cases or []]
        passed = verdicts.count("passed")
        ms = [c["duration_ms"] for c in res.cases or []]
        print(f"  {name:<15} {passed}/{len(cases)} passed  {' '.join(v[:2] for v in verdicts)}"
              f"  ({max(ms) if ms else 0} ms slowest case)")
        # is_palindrome is right in `correct` and `split-on-space`, wrong in the others.
        ok &= (passed == len(cases)) == (name in ("correct", "split-on-space"))
    print(f"  {len(NAMES)} calls, {len(NAMES) * len(cases)} runs in {time.monotonic() - t0:.1f}s")
    return ok


def microvm_stage(client, args):
    """Two rollouts again as microVMs: the same layers and API, each behind a kernel of its own,
    restored from a template VM (the first one of a node boots and saves the template)."""
    node = client.nodes()[0]
    vm = node.get("microvm") or {}
    if "microvm" not in node.get("backends", []):
        print(f"\nmicroVMs: not available on this node ({vm.get('error', 'unknown reason')})")
        return True
    print(f"\nmicroVM backend (QEMU -M microvm, {vm.get('accel')}; {vm.get('accel_probe')}):")
    ok = True
    for name in ("correct", "gives-up"):
        t0 = time.monotonic()
        with client.sandbox(image=args.base, workspace=args.workspace, tools=[args.tool], backend="microvm",
                            memory_mb=512, labels={"demo": "microvm"}) as sb:
            created = time.monotonic() - t0
            sb.write_file("/work/repo/textstats/solution.py", CANDIDATES[name])
            kernel = sb.run("uname -r").stdout.strip()
            r = sb.run(["/opt/tools/grader/bin/grade", "/work/repo"], timeout=120)
            grade = json.loads(r.stdout.strip().splitlines()[-1]) if r.exit_code == 0 else {}
            print(f"  {name:<15} {grade.get('passed', 0)}/{grade.get('total', 0)} tests on guest kernel {kernel}; "
                  f"created in {created:.2f}s, tests ran in {time.monotonic() - t0 - created:.1f}s")
            ok &= (grade.get("passed") == grade.get("total")) == (name == "correct")
    return ok


def egress_bytes(client):
    """warren_egress_bytes_total by source, from /metrics."""
    req = urllib.request.Request(client.url + "/metrics", headers={"Authorization": "Bearer " + client.token})
    with urllib.request.urlopen(req, timeout=30) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("warren_egress_bytes_total{"):
            src = line.split('source="', 1)[1].split('"', 1)[0]
            out[src] = int(float(line.rsplit(" ", 1)[1]))
    return out


APT = ("apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends jq >/dev/null "
       "&& jq --version")


def network_stages(client, image):
    """Setup with the Debian archive allowed (apt through the node's caching proxy), twice,
    then the evaluation stage with no network. Skipped if this machine cannot reach the
    archive."""
    print("\nnetwork: setup stage with the Debian archive allowed, then evaluation with none:")
    for i in (1, 2):
        before = egress_bytes(client)
        with client.sandbox(image=image, network={"mode": "egress", "allow": ["deb.debian.org:80/tcp", "security.debian.org:80/tcp"]},
                            labels={"demo": "network"}) as sb:
            t0 = time.monotonic()
            r = sb.run(APT, timeout=300)
            took = time.monotonic() - t0
            if r.exit_code != 0:
                print(f"  skipped: apt could not reach the Debian archive from here ({r.stderr.strip()[-200:]})")
                return True
            after = egress_bytes(client)
            up = (after.get("upstream", 0) - before.get("upstream", 0)) / 1e6
            cached = (after.get("cache", 0) - before.get("cache", 0)) / 1e6
            print(f"  sandbox {i}: apt-get update && install jq -> {r.stdout.strip()} in {took:.1f}s; "
                  f"{up:.1f} MB from upstream, {cached:.1f} MB from the node's cache")
            if i == 2:
                sb.set_network(None)
                t0 = time.monotonic()
                r = sb.run("apt-get update 2>&1 | grep -m1 -i -E 'unreachable|could not|failed' ; exit 0", timeout=120)
                print(f"  after set_network(None): apt-get update fails in {time.monotonic() - t0:.1f}s: "
                      f"{r.stdout.strip()[:110]}")
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default="demo-py:bookworm")
    ap.add_argument("--workspace", default="demo-repo:1")
    ap.add_argument("--tool", default="demo-grader:1")
    ap.add_argument("--count", type=int, default=32)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--test-timeout", type=float, default=5)
    ap.add_argument("--no-network", action="store_true", help="skip the network stages")
    ap.add_argument("--label", default="rollouts",
                    help="the `demo` label of this batch's sandboxes (its leak check lists them)")
    ap.add_argument("--rollouts-only", action="store_true",
                    help="only the rollouts (a cluster: no fncall, microVM or network stages)")
    args = ap.parse_args()

    client = warren.Client()
    t0 = time.monotonic()
    results, errors = [], []
    with cf.ThreadPoolExecutor(args.workers) as pool:
        futs = [pool.submit(rollout, client, args, k) for k in range(args.count)]
        for f in cf.as_completed(futs):
            try:
                results.append(f.result())
            except warren.WarrenError as e:
                errors.append(str(e))
    wall = time.monotonic() - t0
    results.sort(key=lambda r: r["k"])

    print(f"{'#':>3}  {'sandbox':<20} {'node':<10} {'candidate':<15} {'tests':>7} {'reward':>6} "
          f"{'create':>8} {'tests ran':>9}")
    for r in results:
        tests = "timeout" if r["timed_out"] else f"{r['passed']}/{r['total']}"
        print(f"{r['k']:>3}  {r['id']:<20} {r['node']:<10} {r['candidate']:<15} {tests:>7} "
              f"{r['reward']:>6.2f} {r['create_ms']:>6.1f}ms {r['test_ms']:>7.0f}ms")
    by_node = {}
    for r in results:
        by_node[r["node"]] = by_node.get(r["node"], 0) + 1
    if len(by_node) > 1:
        print("\nrollouts by node: " + ", ".join(f"{n} {c}" for n, c in sorted(by_node.items())))
    print("\nmean reward by candidate:")
    for name in NAMES:
        rs = [r["reward"] for r in results if r["candidate"] == name]
        if rs:
            print(f"  {name:<15} {statistics.mean(rs):.2f}  ({len(rs)} rollouts)")
    creates = [r["create_ms"] for r in results]
    print(f"\n{len(results)} rollouts in {wall:.1f}s with {args.workers} workers "
          f"({len(results) / wall:.1f} rollouts/s); sandbox create p50 {pct(creates, 0.5):.1f} ms, "
          f"p95 {pct(creates, 0.95):.1f} ms")
    for e in errors:
        print(f"error: {e}")
    left = client.list(labels={"demo": args.label})
    if left:
        print(f"leaked sandboxes: {[s.id for s in left]}")
        return 1
    # The same candidates judged by the fncall backend: no sandbox of their own, each test case
    # run in a fresh isolated worker of a runner made from the same Debian base.
    judged = True
    if not args.rollouts_only:
        judged = judge_with_calls(client, args.base)
        judged &= microvm_stage(client, args)
        if not args.no_network:
            network_stages(client, args.base)
    right = all(r["reward"] == 1.0 for r in results if r["candidate"] == "correct")
    wrong = all(r["reward"] < 1.0 for r in results if r["candidate"] != "correct")
    if errors or not right or not wrong or not judged:
        print("unexpected rewards or errors")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
