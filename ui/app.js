// The Warren dashboard: one page, its views chosen by the URL's fragment (#/fleet,
// #/sandboxes, #/sandboxes/ID, ...). Everything comes from the public API with the user's
// token (kept in this tab's sessionStorage only), so a view shows what the token's scopes
// allow; a refusal is shown where the data would be. No library, nothing from another origin.
"use strict";

const TOKEN_KEY = "warren.token";
const REFRESH_MS = 2000;
const HOUR_OF_SAMPLES = 3600 * 1000 / REFRESH_MS;

let timer = null;     // the current view's refresh
let aborter = null;   // the current view's open streams
const samples = [];   // fleet charts: what this tab has seen, at most an hour of it

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
  const t0 = points.length ? points[0].t : 0, t1 = points.length ? points[points.length - 1].t : 1;
  const x = (t) => pad + (w - 2 * pad) * (t1 > t0 ? (t - t0) / (t1 - t0) : 1);
  const y = (v) => h - pad - (h - 2 * pad) * (v / max);
  const text = (tx, ty, s) => {
    const e = document.createElementNS(svg.namespaceURI, "text");
    e.setAttribute("x", tx); e.setAttribute("y", ty); e.setAttribute("font-size", "11");
    e.textContent = s;
    svg.append(e);
  };
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

async function fleetView(main) {
  const [nodes, metricsText] = await Promise.all([
    apiJson("/v1/nodes").catch((e) => e),
    api("/metrics").then((r) => r.text()).catch((e) => e),
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
    parts.push(el("div", { class: "tiles", id: "sandbox-counts" },
      el("div", { class: "tile" }, el("div", { class: "n", id: "sandboxes-total" }, total),
        el("div", { class: "l" }, "sandboxes")),
      Object.entries(states).map(([k, v]) => el("div", { class: "tile", "data-state": k },
        el("div", { class: "n" }, v), el("div", { class: "l" }, k))),
      Object.entries(backends).map(([k, v]) => el("div", { class: "tile", "data-backend": k },
        el("div", { class: "n" }, v), el("div", { class: "l" }, "backend " + k)))));
    const now = Date.now();
    const sample = {
      t: now,
      creates: sum(m, "warren_create_seconds_count"),
      createSum: sum(m, "warren_create_seconds_sum"),
      execs: sum(m, "warren_exec_seconds_count"),
      execSum: sum(m, "warren_exec_seconds_sum"),
    };
    samples.push(sample);
    while (samples.length > HOUR_OF_SAMPLES) samples.shift();
    const rate = [], createLat = [], execLat = [];
    for (let i = 1; i < samples.length; i++) {
      const a = samples[i - 1], b = samples[i], dt = (b.t - a.t) / 1000;
      if (dt <= 0 || b.creates < a.creates) continue;  // a restart reset the counters
      rate.push({ t: b.t, v: (b.creates - a.creates) / dt });
      const dc = b.creates - a.creates, de = b.execs - a.execs;
      createLat.push({ t: b.t, v: dc > 0 ? 1000 * (b.createSum - a.createSum) / dc : 0 });
      execLat.push({ t: b.t, v: de > 0 ? 1000 * (b.execSum - a.execSum) / de : 0 });
    }
    parts.push(el("h2", {}, "Since this page opened"),
      el("div", { class: "tiles" }, chart("creates/s", rate, "/s"),
        chart("create latency", createLat, "ms"), chart("exec latency", execLat, "ms")));
  } else {
    parts.push(refusal(metricsText));
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

// A cluster node reports capacity and use (NodeResources); `warren serve`'s node its density.
function nodeCpu(n) {
  if (n.capacity?.cpu_milli !== undefined) {
    const used = (n.used?.cpu_milli || 0) / 1000, total = n.capacity.cpu_milli / 1000;
    return el("div", {}, `${used} / ${total}`, bar(used, total));
  }
  if (n.density?.committed_cpus !== undefined) return `${n.density.committed_cpus} committed`;
  return "";
}

function nodeMemory(n) {
  if (n.capacity?.memory_mb !== undefined) {
    const used = (n.used?.memory_mb || 0) * 1048576, total = n.capacity.memory_mb * 1048576;
    return el("div", {}, `${bytes(used)} / ${bytes(total)}`, bar(used, total));
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

async function sandboxesView(main) {
  const q = currentQuery();
  const form = el("form", { class: "filters", id: "sandbox-filters" },
    el("label", {}, "label (k=v)", el("input", { name: "label", value: q.get("label") || "" })),
    el("label", {}, "state", el("input", { name: "state", value: q.get("state") || "" })),
    el("label", {}, "backend", el("input", { name: "backend", value: q.get("backend") || "" })),
    el("label", {}, "image", el("input", { name: "image", value: q.get("image") || "" })),
    el("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const p = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v) p.set(k, v);
    location.hash = "#/sandboxes" + (p.toString() ? "?" + p : "");
  });
  const server = new URLSearchParams();
  if (q.get("label")) server.append("label", q.get("label"));
  if (q.get("state")) server.set("state", q.get("state"));
  let list;
  try {
    list = (await apiJson("/v1/sandboxes?" + server)).sandboxes || [];
  } catch (e) {
    main.replaceChildren(el("h1", {}, "Sandboxes"), form, refusal(e));
    return;
  }
  if (q.get("backend")) list = list.filter((s) => s.backend === q.get("backend"));
  if (q.get("image")) list = list.filter((s) => (s.image || "").includes(q.get("image")));
  main.replaceChildren(el("h1", {}, "Sandboxes"), form,
    el("p", { class: "muted", id: "sandbox-count" }, `${list.length} sandboxes`),
    table(["id", "state", "backend", "image", "labels", "created"],
      list.map((s) => [el("a", { href: "#/sandboxes/" + s.id, class: "sandbox-link" }, s.id),
        s.state, s.backend || "", s.image || "", labelsText(s.labels), s.created_at || ""])));
}

async function sandboxView(main, id) {
  let sb;
  try {
    sb = await apiJson("/v1/sandboxes/" + encodeURIComponent(id));
  } catch (e) {
    main.replaceChildren(el("h1", {}, id), refusal(e));
    return;
  }
  const pretty = (v) => el("pre", {}, JSON.stringify(v, null, 2));
  const follow = el("form", { class: "filters", id: "follow-form" },
    el("label", {}, "follow exec", el("input", { name: "exec", placeholder: "ex-..." })),
    el("button", { type: "submit" }, "Follow"));
  follow.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const exec = new FormData(follow).get("exec");
    if (exec) location.hash = `#/sandboxes/${id}/execs/${exec}`;
  });
  main.replaceChildren(
    el("h1", {}, "Sandbox ", el("code", {}, sb.id)),
    el("div", { class: "tiles" },
      el("div", { class: "tile" }, el("div", { class: "n", id: "sandbox-state" }, sb.state),
        el("div", { class: "l" }, "state")),
      el("div", { class: "tile" }, el("div", { class: "n" }, sb.backend || ""),
        el("div", { class: "l" }, "backend")),
      el("div", { class: "tile" }, el("div", { class: "n" }, sb.image || ""),
        el("div", { class: "l" }, "image"))),
    el("h2", {}, "Limits"), pretty(sb.limits || pick(sb, ["cpu", "memory_mb", "disk_mb", "pids", "timeout"])),
    el("h2", {}, "Network policy"), pretty(sb.network || { mode: "none" }),
    el("h2", {}, "Lineage"), pretty(sb.lineage || {}),
    el("h2", {}, "Labels"), pretty(sb.labels || {}),
    el("h2", {}, "Exec output"), follow,
    el("h2", {}, "Everything"), pretty(sb));
}

function pick(o, keys) {
  const out = {};
  for (const k of keys) if (o[k] !== undefined) out[k] = o[k];
  return out;
}

// An exec's output as it arrives: the API's NDJSON stream, resumed after the last sequence
// number seen if the connection drops.
async function execView(main, id, execId) {
  const out = el("pre", { id: "exec-output" });
  const status = el("p", { class: "muted", id: "exec-status" }, "following…");
  main.replaceChildren(el("h1", {}, "Exec ", el("code", {}, execId), " in ",
    el("a", { href: "#/sandboxes/" + id }, id)), status, out);
  let after = 0;
  const signal = aborter.signal;
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

async function imagesView(main) {
  let layers;
  try {
    layers = await apiJson("/v1/layers");
  } catch (e) {
    main.replaceChildren(el("h1", {}, "Images"), refusal(e));
    return;
  }
  const list = layers.layers || layers.images || [];
  main.replaceChildren(el("h1", {}, "Images"),
    table(["name", "digest", "size", "created"], list.map((l) => [
      el("span", { class: "image-name" }, l.name || l.ref || (l.tags || []).join(", ")),
      el("code", {}, (l.digest || "").slice(0, 19)), bytes(l.size_bytes ?? l.size), l.created_at || ""])));
}

async function callsView(main) {
  let text;
  try {
    text = await (await api("/metrics")).text();
  } catch (e) {
    main.replaceChildren(el("h1", {}, "fncall"), refusal(e));
    return;
  }
  const m = parseMetrics(text);
  const verdicts = {};
  for (const x of m.filter((x) => x.name === "warren_calls_total"))
    verdicts[x.labels.verdict || x.labels.status || "all"] = (verdicts[x.labels.verdict || x.labels.status || "all"] || 0) + x.value;
  const runners = m.filter((x) => x.name === "warren_fncall_runners");
  main.replaceChildren(el("h1", {}, "fncall"),
    el("div", { class: "tiles", id: "call-verdicts" }, Object.entries(verdicts).map(([k, v]) =>
      el("div", { class: "tile", "data-verdict": k }, el("div", { class: "n" }, v), el("div", { class: "l" }, k)))),
    el("h2", {}, "Runner pool"),
    table(["runner", "count"], runners.map((r) => [labelsText(r.labels), String(r.value)])));
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
  if (!id) { main.replaceChildren(el("h1", {}, "Trajectories"), form); return; }
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
  const live = path[0] === "fleet" || path[0] === "calls" || (path[0] === "sandboxes" && path.length <= 2);
  try {
    await view();
  } catch (e) {
    main.replaceChildren(refusal(e));
  }
  // Live views poll the API; an exec view streams instead.
  // A refresh waits while the user is typing in one of the view's fields.
  if (live && token())
    timer = setInterval(() => {
      if (document.activeElement?.tagName !== "INPUT") view().catch(() => {});
    }, REFRESH_MS);
}

window.addEventListener("hashchange", () => render());
document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("logout").addEventListener("click", () => logout());
  render();
});
