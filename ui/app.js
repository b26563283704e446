// The Warren dashboard: one page, its views chosen by the URL's fragment (#/fleet,
// #/sandboxes, #/sandboxes/ID, ...). Everything comes from the public API with the user's
// token (kept in this tab's sessionStorage only), so a view shows what the token's scopes
// allow; a refusal is shown where the data would be. No library, nothing from another origin.
"use strict";

const TOKEN_KEY = "warren.token";
const REFRESH_MS = 2000;
const PAGE_SIZE = 100;
const HOUR_MS = 3600 * 1000;  // sandboxes a list page asks the server for

let timer = null;     // the current view's refresh
let aborter = null;   // the current view's open streams
let generation = 0;   // renders so far: a render overtaken by a newer one sets no timer

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

async function api(path, options = {}) {
  const res = await fetch(path, {
    ...options,
    headers: { Authorization: "Bearer " + token(), ...(options.headers || {}) },
  });
  if (!res.ok) {
    let code = "", message = res.statusText;
    try {
      const body = await res.json();
      code = body.error?.code || body.code || "";
      message = body.error?.message || body.message || message;
    } catch (_) { /* not JSON */ }
    if (res.status === 401) logout("the token was refused: " + message);
    throw new ApiError(res.status, code, message);
  }
  return res;
}

async function apiJson(path) { return (await api(path)).json(); }

// --- small DOM helpers -----------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null) e.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function table(headers, rows, rowAttrs = () => ({})) {
  return el("table", {},
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.map((r, i) => el("tr", rowAttrs(r, i), r.map((c) => el("td", {}, c))))));
}

function refusal(err) {
  if (err instanceof ApiError && err.status === 403)
    return el("p", { class: "error", "data-refused": "true" },
      "This token may not see this (", err.message, ").");
  return el("p", { class: "error" }, String(err.message || err));
}

function bytes(n) {
  if (n === undefined || n === null) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + units[i];
}

function bar(used, total) {
  const pct = total ? Math.min(100, Math.round(100 * used / total)) : 0;
  const fill = el("span");
  fill.style.width = pct + "%";  // through the CSSOM: the page's policy allows no style attribute
  return el("div", { class: "bar", title: pct + "%" }, fill);
}

function labelsText(labels) {
  return Object.entries(labels || {}).map(([k, v]) => `${k}=${v}`).join(", ");
}

// --- Prometheus text, for the fleet's and fncall's figures ------------------------------

function parseMetrics(text) {
  const out = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = line.match(/^([a-zA-Z_:][\w:]*)(\{(.*)\})?\s+(\S+)/);
    if (!m) continue;
    const labels = {};
    for (const kv of (m[3] || "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[kv[1]] = kv[2];
    out.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return out;
}

function sum(metrics, name, filter = () => true) {
  return metrics.filter((m) => m.name === name && filter(m.labels))
    .reduce((a, m) => a + m.value, 0);
}

// --- charts: a polyline in SVG ---------------------------------------------------------

function chart(title, points, unit) {
  const w = 520, h = 140, pad = 28;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "chart");
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.setAttribute("width", w);
  svg.setAttribute("height", h);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", title);
  const max = Math.max(1e-9, ...points.map((p) => p.v));
  // The x axis is the last hour, whatever part of it the server has samples for.
  const t1 = points.length ? points[points.length - 1].t : Date.now(), t0 = t1 - HOUR_MS;
  const x = (t) => pad + (w - 2 * pad) * (t1 > t0 ? (t - t0) / (t1 - t0) : 1);
  const y = (v) => h - pad - (h - 2 * pad) * (v / max);
  const text = (tx, ty, s) => {
    const e = document.createElementNS(svg.namespaceURI, "text");
    e.setAttribute("x", tx); e.setAttribute("y", ty); e.setAttribute("font-size", "11");
    e.textContent = s;
    svg.append(e);
  };
  text(pad, h - 8, "an hour ago");
  text(w - pad - 22, h - 8, "now");
  text(pad, 14, `${title} (now ${points.length ? points[points.length - 1].v.toFixed(2) : "-"} ${unit}, max ${max.toFixed(2)})`);
  if (points.length > 1) {
    const line = document.createElementNS(svg.namespaceURI, "polyline");
    line.setAttribute("fill", "none");
    line.setAttribute("stroke", "#2457c5");
    line.setAttribute("stroke-width", "1.5");
    line.setAttribute("points", points.map((p) => `${x(p.t).toFixed(1)},${y(p.v).toFixed(1)}`).join(" "));
    svg.append(line);
  }
  return svg;
}

// --- views -----------------------------------------------------------------------------

// Rates and mean latencies over the hour the server kept (GET /v1/stats): the difference of
// each two samples; a counter that went down is a restart of the server, not a point.
function historySeries(history) {
  const rate = [], createLat = [], execLat = [], live = [], calls = [];
  for (let i = 1; i < history.length; i++) {
    const a = history[i - 1], b = history[i];
    const t = Date.parse(b.at), dt = (t - Date.parse(a.at)) / 1000;
    if (dt <= 0 || b.creates < a.creates || b.execs < a.execs || b.calls < a.calls) continue;
    const dc = b.creates - a.creates, de = b.execs - a.execs;
    rate.push({ t, v: dc / dt });
    calls.push({ t, v: (b.calls - a.calls) / dt });
    createLat.push({ t, v: dc > 0 ? 1000 * (b.create_seconds - a.create_seconds) / dc : 0 });
    execLat.push({ t, v: de > 0 ? 1000 * (b.exec_seconds - a.exec_seconds) / de : 0 });
    live.push({ t, v: (b.sandboxes.running || 0) + (b.sandboxes.paused || 0) });
  }
  return { rate, createLat, execLat, live, calls };
}

async function fleetView(main) {
  const [nodes, metricsText, stats] = await Promise.all([
    apiJson("/v1/nodes").catch((e) => e),
    api("/metrics").then((r) => r.text()).catch((e) => e),
    apiJson("/v1/stats").catch((e) => e),
  ]);
  const parts = [el("h1", {}, "Fleet")];
  if (!(metricsText instanceof Error)) {
    const m = parseMetrics(metricsText);
    const states = {}, backends = {};
    for (const s of m.filter((x) => x.name === "warren_sandboxes")) {
      states[s.labels.state] = (states[s.labels.state] || 0) + s.value;
      backends[s.labels.backend] = (backends[s.labels.backend] || 0) + s.value;
    }
    const total = Object.values(states).reduce((a, b) => a + b, 0);
    const link = (q) => "#/sandboxes?" + new URLSearchParams(q);
    parts.push(el("div", { class: "tiles", id: "sandbox-counts" },
      el("div", { class: "tile" }, el("div", { class: "n", id: "sandboxes-total" }, total),
        el("div", { class: "l" }, "sandboxes")),
      Object.entries(states).map(([k, v]) => el("a", { class: "tile", "data-state": k, href: link({ state: k }) },
        el("div", { class: "n" }, v), el("div", { class: "l" }, k))),
      Object.entries(backends).map(([k, v]) => el("a", { class: "tile", "data-backend": k, href: link({ backend: k }) },
        el("div", { class: "n" }, v), el("div", { class: "l" }, "backend " + k)))));
  } else {
    parts.push(refusal(metricsText));
  }
  parts.push(el("h2", {}, "The last hour"));
  if (!(stats instanceof Error)) {
    const h = historySeries(stats.history || []);
    parts.push(el("div", { class: "tiles", id: "fleet-charts" },
      chart("creates/s", h.rate, "/s"), chart("create latency (mean)", h.createLat, "ms"),
      chart("exec latency (mean)", h.execLat, "ms"), chart("live sandboxes", h.live, "")));
  } else {
    parts.push(refusal(stats));
  }
  parts.push(el("h2", {}, "Nodes"));
  if (nodes instanceof Error) {
    parts.push(refusal(nodes));
  } else {
    const list = nodes.nodes || [];
    parts.push(table(["node", "state", "sandboxes", "CPU", "memory", "network"],
      list.map((n) => [
        el("span", { class: "node-name" }, n.name || n.id || "node"),
        n.state || (n.cordoned ? "cordoned" : "ready"),
        String(n.sandboxes ?? ""),
        nodeCpu(n), nodeMemory(n),
        n.network ? `${n.network.subnet || ""}${n.network.ipv6 ? " + IPv6" : ""}` : "off",
      ])));
  }
  main.replaceChildren(...parts);
}

// A cluster node reports its capacity, what placement reserved on it (the sandboxes'
// requests) and what they use now (NodeRecord); `warren serve`'s node its density.
function nodeCpu(n) {
  if (n.capacity?.cpu_milli !== undefined) {
    const reserved = (n.reserved?.cpu_milli || 0) / 1000, total = n.capacity.cpu_milli / 1000;
    return el("div", {}, `${reserved} of ${total} reserved`, bar(reserved, total));
  }
  if (n.density?.committed_cpus !== undefined) return `${n.density.committed_cpus} committed`;
  return "";
}

function nodeMemory(n) {
  if (n.capacity?.memory_mb !== undefined) {
    const mb = 1048576, total = n.capacity.memory_mb * mb;
    const reserved = (n.reserved?.memory_mb || 0) * mb, used = (n.used?.memory_mb || 0) * mb;
    return el("div", {}, `${bytes(reserved)} of ${bytes(total)} reserved, ${bytes(used)} in use`,
      bar(reserved, total));
  }
  const d = n.density;
  if (d?.memory_budget_bytes) {
    return el("div", {}, `${bytes(d.used_bytes || 0)} / ${bytes(d.memory_budget_bytes)}`,
      bar(d.used_bytes || 0, d.memory_budget_bytes));
  }
  return "";
}

function currentQuery() {
  const q = location.hash.split("?")[1] || "";
  return new URLSearchParams(q);
}

// The list pages and filters on the server (GET /v1/sandboxes with `limit` and
// `page_token`): a fleet of 100,000 sandboxes costs the browser one page.
const FILTERS = ["label", "job", "state", "backend", "image", "limit"];

async function sandboxesView(main) {
  const q = currentQuery();
  const input = (name, hint) => el("label", {}, hint,
    el("input", { name, value: q.get(name) || "", placeholder: name === "label" ? "k=v" : "" }));
  const form = el("form", { class: "filters", id: "sandbox-filters" },
    input("label", "label (k=v)"), input("job", "job"), input("state", "state"),
    input("backend", "backend"), input("image", "image (name:tag)"),
    el("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const p = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v) p.set(k, v);
    location.hash = "#/sandboxes" + (p.toString() ? "?" + p : "");
  });
  const server = new URLSearchParams({ limit: q.get("limit") || String(PAGE_SIZE) });
  if (q.get("label")) server.append("label", q.get("label"));
  if (q.get("job")) server.append("label", "job=" + q.get("job"));
  for (const k of ["state", "backend", "image"]) if (q.get(k)) server.set(k, q.get(k));
  if (q.get("page")) server.set("page_token", q.get("page"));
  let answer;
  try {
    answer = await apiJson("/v1/sandboxes?" + server);
  } catch (e) {
    main.replaceChildren(el("h1", {}, "Sandboxes"), form, refusal(e));
    return;
  }
  const list = answer.sandboxes || [];
  const here = new URLSearchParams();
  for (const k of FILTERS) if (q.get(k)) here.set(k, q.get(k));
  const first = Number(q.get("from") || 0);
  const pager = el("p", { class: "muted pager" },
    el("span", { id: "sandbox-count" },
      list.length ? `${first + 1}–${first + list.length} of ${answer.total}` : `0 of ${answer.total}`),
    q.get("page") ? el("a", { href: "#/sandboxes?" + here, id: "first-page" }, "first page") : null,
    answer.next_page_token ? el("a", {
      id: "next-page",
      href: "#/sandboxes?" + new URLSearchParams([...here,
        ["page", answer.next_page_token], ["from", String(first + list.length)]]),
    }, "next page") : null);
  main.replaceChildren(el("h1", {}, "Sandboxes"), form, pager,
    table(["id", "state", "backend", "image", "labels", "created"],
      list.map((s) => [el("a", { href: "#/sandboxes/" + s.id, class: "sandbox-link" }, s.id),
        s.state, s.backend || "", s.image || "", labelsText(s.labels), s.created_at || ""])));
}

// A sandbox: its record, its exec history (GET .../execs) refreshed in place, and the
// output of its newest running command streaming in as it comes.
async function sandboxView(main, id) {
  let sb;
  try {
    sb = await apiJson("/v1/sandboxes/" + encodeURIComponent(id));
  } catch (e) {
    main.replaceChildren(el("h1", {}, id), refusal(e));
    return null;
  }
  const pretty = (v) => el("pre", {}, JSON.stringify(v, null, 2));
  const state = el("div", { class: "n", id: "sandbox-state" }, sb.state);
  const history = el("div", { id: "exec-history" });
  const liveTitle = el("p", { class: "muted", id: "live-exec" }, "no command running");
  const liveOut = el("pre", { id: "live-output" });
  main.replaceChildren(
    el("h1", {}, "Sandbox ", el("code", {}, sb.id)),
    el("div", { class: "tiles" },
      el("div", { class: "tile" }, state, el("div", { class: "l" }, "state")),
      el("div", { class: "tile" }, el("div", { class: "n" }, sb.backend || ""),
        el("div", { class: "l" }, "backend")),
      el("div", { class: "tile" }, el("div", { class: "n" }, sb.image || ""),
        el("div", { class: "l" }, "image")),
      sb.trajectory ? el("a", { class: "tile", href: "#/trajectories/" + encodeURIComponent(sb.trajectory) },
        el("div", { class: "n" }, sb.trajectory), el("div", { class: "l" }, "trajectory")) : null),
    el("h2", {}, "Exec history"), history,
    el("h2", {}, "Live output"), liveTitle, liveOut,
    el("h2", {}, "Limits"), pretty(pick(sb, ["cpu", "memory_mb", "disk_mb", "pids", "ttl_s", "idle_timeout_s", "open_files"])),
    el("h2", {}, "Network policy"), pretty(sb.network || { mode: "none" }),
    el("h2", {}, "Filesystem policy"), pretty(sb.filesystem || {}),
    el("h2", {}, "Lineage"), pretty({ lineage: sb.lineage || null, layers: sb.layers || [] }),
    el("h2", {}, "Labels"), pretty(sb.labels || {}),
    el("h2", {}, "Everything"), pretty(sb));

  let following = null;  // the exec whose output streams into the live pane
  const signal = aborter.signal;
  const refresh = async () => {
    const [now, h] = await Promise.all([
      apiJson("/v1/sandboxes/" + encodeURIComponent(id)).catch((e) => e),
      apiJson(`/v1/sandboxes/${encodeURIComponent(id)}/execs`).catch((e) => e),
    ]);
    if (!(now instanceof Error)) state.textContent = now.state;
    if (h instanceof Error) { history.replaceChildren(refusal(h)); return; }
    const execs = (h.execs || []).slice().reverse();  // newest first
    history.replaceChildren(execs.length ? table(
      ["exec", "command", "state", "exit", "started", "time", "output"],
      execs.map((e) => [
        el("a", { class: "exec-link", href: `#/sandboxes/${id}/execs/${e.exec_id}` }, e.exec_id),
        el("code", {}, e.argv.join(" ")), e.state,
        e.exit_code ?? (e.signal || (e.timed_out ? "timed out" : "")),
        e.started_at, e.duration_ms + " ms", bytes(e.output_bytes)]),
      (r, i) => ({ class: "exec " + execs[i].state }))
      : el("p", { class: "muted" }, "no command has run"));
    const running = execs.find((e) => e.state === "running");
    if (running && running.exec_id !== following && !signal.aborted) {
      following = running.exec_id;
      liveOut.replaceChildren();
      liveTitle.replaceChildren("following ", el("code", {}, running.argv.join(" ")), " (",
        el("a", { href: `#/sandboxes/${id}/execs/${running.exec_id}` }, running.exec_id), ")");
      followExec(id, running.exec_id, liveOut, liveTitle, signal)
        .finally(() => { if (following === running.exec_id) following = null; });
    }
  };
  await refresh();
  return refresh;
}

function pick(o, keys) {
  const out = {};
  for (const k of keys) if (o[k] !== undefined) out[k] = o[k];
  return out;
}

// An exec's output as it arrives: the API's NDJSON stream, resumed after the last sequence
// number seen if the connection drops. Ends when the result line comes (shown in `status`).
async function followExec(id, execId, out, status, signal) {
  let after = 0;
  for (let attempt = 0; attempt < 100 && !signal.aborted; attempt++) {
    try {
      const res = await api(`/v1/sandboxes/${encodeURIComponent(id)}/execs/${encodeURIComponent(execId)}/stream?after=${after}`,
        { signal });
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += decoder.decode(value, { stream: true });
        let nl;
        while ((nl = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          if (!line.trim()) continue;
          const ev = JSON.parse(line);
          if (ev.result) {  // the last line: the exec's result
            const r = ev.result;
            status.textContent = r.timed_out ? "timed out"
              : `exited ${r.exit_code ?? ""}${r.signal ? " (signal " + r.signal + ")" : ""}`;
            status.className = r.exit_code === 0 ? "ok" : "error";
            return;
          }
          if (ev.seq) after = Math.max(after, ev.seq);
          if (ev.data) out.append(ev.data);
        }
      }
      // The connection ended before the result: resume after the last line seen.
      await new Promise((r) => setTimeout(r, 500));
    } catch (e) {
      if (signal.aborted) return;
      if (e instanceof ApiError) { status.replaceWith(refusal(e)); return; }
      await new Promise((r) => setTimeout(r, 500));
    }
  }
}

async function execView(main, id, execId) {
  const out = el("pre", { id: "exec-output" });
  const status = el("p", { class: "muted", id: "exec-status" }, "following…");
  main.replaceChildren(el("h1", {}, "Exec ", el("code", {}, execId), " in ",
    el("a", { href: "#/sandboxes/" + id }, id)), status, out);
  await followExec(id, execId, out, status, aborter.signal);
}

// Layers and their tags; how many sandboxes use each comes from the server's filtered count
// (`total` of a one-item page), so it costs one small answer per image, whatever the fleet.
async function imagesView(main) {
  let layers;
  try {
    layers = await apiJson("/v1/layers");
  } catch (e) {
    main.replaceChildren(el("h1", {}, "Images"), refusal(e));
    return;
  }
  const list = (layers.layers || layers.images || []).slice(0, 200);
  const uses = await Promise.all(list.map((l) => {
    const ref = l.ref || `${l.name}:${l.tag}`;
    return apiJson("/v1/sandboxes?" + new URLSearchParams({ image: ref, limit: "1" }))
      .then((a) => el("a", { class: "image-uses", href: "#/sandboxes?" + new URLSearchParams({ image: ref }) },
        String(a.total)))
      .catch(() => el("span", { class: "muted", title: "this token may not list sandboxes" }, "—"));
  }));
  main.replaceChildren(el("h1", {}, "Images"),
    table(["name", "tag", "kind", "digest", "size", "sandboxes", "created"], list.map((l, i) => [
      el("span", { class: "image-name" }, l.name || l.ref || ""), l.tag || "", l.kind || "",
      el("code", { title: l.digest || "" }, (l.digest || "").slice(0, 19)), bytes(l.size_bytes ?? l.size),
      uses[i], l.created_at || ""])));
}

// fncall: calls per second over the hour, verdicts and the runner pool (GET /v1/stats).
async function callsView(main) {
  let stats;
  try {
    stats = await apiJson("/v1/stats");
  } catch (e) {
    main.replaceChildren(el("h1", {}, "fncall"), refusal(e));
    return;
  }
  const c = stats.calls || {};
  const h = historySeries(stats.history || []);
  const tile = (n, l, attrs = {}) => el("div", { class: "tile", ...attrs }, el("div", { class: "n" }, n),
    el("div", { class: "l" }, l));
  main.replaceChildren(el("h1", {}, "fncall"),
    c.enabled ? "" : el("p", { class: "muted" }, "fncall is not enabled on this server"),
    el("div", { class: "tiles" }, tile(c.admitted ?? 0, "calls admitted"), tile(c.refused ?? 0, "refused (quota)")),
    el("h2", {}, "Verdicts"),
    el("div", { class: "tiles", id: "call-verdicts" }, Object.entries(c.verdicts || {}).map(([k, v]) =>
      tile(v, k, { "data-verdict": k }))),
    el("h2", {}, "The last hour"),
    el("div", { class: "tiles" }, chart("calls/s", h.calls, "/s")),
    el("h2", {}, "Runner pool"),
    table(["node", "runner", "image", "in flight", "served", "healthy", "zygote"], (c.runners || []).map((r) => [
      r.node ?? "", el("code", { class: "runner" }, r.id ?? ""), r.image ?? "", String(r.inflight ?? ""),
      String(r.served ?? ""), r.healthy ? "yes" : "no", r.zygote ? "yes" : "no"])));
}

async function trajectoriesView(main, id) {
  const form = el("form", { class: "filters", id: "trajectory-form" },
    el("label", {}, "trajectory id", el("input", { name: "id", value: id || "" })),
    el("button", { type: "submit" }, "Show"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const v = new FormData(form).get("id");
    if (v) location.hash = "#/trajectories/" + encodeURIComponent(v);
  });
  if (!id) {
    // The trajectories the live sandboxes record (the newest 1,000 sandboxes): one click to
    // each; any other by its id.
    let list = [];
    try {
      const a = await apiJson("/v1/sandboxes?limit=1000&state=running");
      const seen = new Map();
      for (const sb of a.sandboxes || []) if (sb.trajectory) seen.set(sb.trajectory, sb);
      list = [...seen.entries()];
    } catch (_) { /* a token that may not list sandboxes still opens one by id */ }
    main.replaceChildren(el("h1", {}, "Trajectories"), form,
      el("h2", {}, "Recorded by running sandboxes"),
      list.length ? table(["trajectory", "sandbox", "created"], list.map(([t, sb]) => [
        el("a", { class: "trajectory-link", href: "#/trajectories/" + encodeURIComponent(t) }, t),
        el("a", { href: "#/sandboxes/" + sb.id }, sb.id), sb.created_at || ""]))
        : el("p", { class: "muted" }, "none"));
    return;
  }
  let t;
  try {
    t = await apiJson("/v1/trajectories/" + encodeURIComponent(id));
  } catch (e) {
    main.replaceChildren(el("h1", {}, "Trajectory ", el("code", {}, id)), form, refusal(e));
    return;
  }
  const rows = (t.steps || []).map((s) => {
    const argv = s.request?.argv ? s.request.argv.join(" ") : (s.request?.cmd || "");
    const r = s.result || {};
    const out = (r.stdout || "") + (r.stderr ? "\n" + r.stderr : "");
    const ms = Date.parse(s.finished_at) - Date.parse(s.started_at);
    const replays = (s.reruns || []).map((x) => `${x.sandbox_id}${x.diverged ? " (diverged)" : ""}`);
    return { cells: [String(s.step), el("code", {}, argv), el("pre", {}, out), String(r.exit_code ?? ""),
      isNaN(ms) ? "" : ms + " ms", replays.length ? "replayed in " + replays.join(", ") : ""],
      replayed: replays.length > 0 };
  });
  main.replaceChildren(el("h1", {}, "Trajectory ", el("code", {}, id)), form,
    table(["step", "command", "output", "exit", "time", "replays"], rows.map((r) => r.cells),
      (r, i) => (rows[i].replayed ? { class: "replayed step" } : { class: "step" })));
}

// --- routing -------------------------------------------------------------------------

function logout(why) {
  sessionStorage.removeItem(TOKEN_KEY);
  render(why);
}

function showLogin(main, why) {
  document.getElementById("logout").hidden = true;
  main.replaceChildren(document.getElementById("login").content.cloneNode(true));
  const form = document.getElementById("login-form");
  if (why) document.getElementById("login-error").textContent = why;
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const t = document.getElementById("token").value.trim();
    sessionStorage.setItem(TOKEN_KEY, t);
    try {
      await api("/v1/nodes");
      render();
    } catch (e) {
      sessionStorage.removeItem(TOKEN_KEY);
      document.getElementById("login-error").textContent = "Refused: " + e.message;
    }
  });
}

async function render(why) {
  const gen = ++generation;
  clearInterval(timer);
  timer = null;
  if (aborter) aborter.abort();
  aborter = new AbortController();
  const main = document.getElementById("main");
  if (!token()) { showLogin(main, why); return; }
  document.getElementById("logout").hidden = false;
  const path = (location.hash.replace(/^#/, "").split("?")[0] || "/fleet").split("/").filter(Boolean);
  for (const a of document.querySelectorAll("#nav a"))
    a.classList.toggle("active", a.dataset.page === path[0]);
  const views = {
    fleet: () => fleetView(main),
    sandboxes: () => (path[2] === "execs" && path[3] ? execView(main, path[1], path[3])
      : path[1] ? sandboxView(main, path[1]) : sandboxesView(main)),
    images: () => imagesView(main),
    calls: () => callsView(main),
    trajectories: () => trajectoriesView(main, path[1]),
  };
  const view = views[path[0]] || views.fleet;
  // A new view starts empty: what the last one showed must not pass for this one's answer.
  main.replaceChildren(el("p", { class: "muted", id: "loading" }, "loading…"));
  const live = path[0] === "fleet" || path[0] === "calls" || (path[0] === "sandboxes" && path.length <= 2);
  let refresh = view;
  try {
    // A view that keeps open streams refreshes its parts in place (the function it returns)
    // rather than being drawn again.
    const own = await view();
    if (typeof own === "function") refresh = own;
  } catch (e) {
    main.replaceChildren(refusal(e));
  }
  if (gen !== generation) return;
  // Live views poll the API (an exec's output streams instead). A refresh waits while the
  // user types in one of the view's fields, and while the tab is hidden.
  if (live && token())
    timer = setInterval(() => {
      if (document.hidden || document.activeElement?.tagName === "INPUT") return;
      refresh().catch(() => {});
    }, REFRESH_MS);
}

window.addEventListener("hashchange", () => render());
document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("logout").addEventListener("click", () => logout());
  render();
});
