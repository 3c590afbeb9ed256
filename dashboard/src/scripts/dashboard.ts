// Polls GET /api/status and renders it. The history behind the charts (throughput and
// freshness over time) lives only in this page: it starts when the page opens.
//
// URL parameters: ?interval=<ms> (default 2000), ?token=<bearer token> (kept in
// localStorage; needed when the server requires one), ?api=<base url> (default: same origin).

type Json = Record<string, any>;

interface Point {
  t: number;
  events: Record<string, number>;
  freshness: Record<string, number | null>;
}

const HISTORY = 180;
const COLORS = ["#58a6ff", "#3fb950", "#d29922", "#bc8cff", "#f85149", "#39c5cf", "#ff9bce"];

const params = new URLSearchParams(location.search);
const intervalMs = Math.max(200, Number(params.get("interval") ?? 2000) || 2000);
const apiBase = (params.get("api") ?? "").replace(/\/$/, "");
if (params.get("token")) localStorage.setItem("tidelake-token", params.get("token") ?? "");
const token = localStorage.getItem("tidelake-token");

const history: Point[] = [];
let lastOk: number | null = null;
const colorOf: Record<string, string> = {};

const $ = (id: string): HTMLElement => document.getElementById(id) as HTMLElement;

function esc(v: unknown): string {
  return String(v ?? "").replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function secs(v: number | null | undefined): string {
  if (v === null || v === undefined) return "-";
  if (v < 10) return `${v.toFixed(1)} s`;
  if (v < 120) return `${Math.round(v)} s`;
  if (v < 7200) return `${Math.round(v / 60)} min`;
  return `${(v / 3600).toFixed(1)} h`;
}

function num(v: number | null | undefined): string {
  return v === null || v === undefined ? "-" : Math.round(v).toLocaleString("en");
}

function clock(ms: number | null | undefined): string {
  return ms ? new Date(ms).toISOString().slice(11, 19) : "-";
}

function headers(): HeadersInit {
  return token ? { Authorization: `Bearer ${token}` } : {};
}

function color(table: string): string {
  if (!colorOf[table]) colorOf[table] = COLORS[Object.keys(colorOf).length % COLORS.length];
  return colorOf[table];
}

/** Events per second of each table between the two newest polls that differ in time. */
function throughput(): Record<string, number> {
  const out: Record<string, number> = {};
  if (history.length < 2) return out;
  const a = history[Math.max(0, history.length - 6)];
  const b = history[history.length - 1];
  const dt = (b.t - a.t) / 1000;
  if (dt <= 0) return out;
  for (const [table, n] of Object.entries(b.events)) {
    out[table] = Math.max(0, (n - (a.events[table] ?? n)) / dt);
  }
  return out;
}

function setBanner(kind: string, text: string): void {
  const banner = $("banner");
  banner.dataset.kind = kind;
  banner.textContent = text;
  banner.hidden = kind === "none";
}

function render(s: Json): void {
  const now = Date.now();
  history.push({
    t: now,
    events: Object.fromEntries(s.tables.map((t: Json) => [t.table, t.events])),
    freshness: Object.fromEntries(s.tables.map((t: Json) => [t.table, t.freshness_s])),
  });
  while (history.length > HISTORY) history.shift();
  const rates = throughput();

  const state = $("pipeline-state");
  state.textContent = s.state;
  state.dataset.state = s.state;

  const stale = s.tables.filter((t: Json) => t.state === "stale");
  if (s.state === "down") {
    setBanner("down", `Pipeline down: ${s.problems.join("; ")}`);
  } else if (stale.length || s.state === "stale") {
    const which = stale.map((t: Json) => `${t.table} (${secs(t.freshness_s)} behind)`);
    setBanner("stale", `Data is stale: ${which.length ? which.join(", ") : s.problems.join("; ")}`);
  } else {
    setBanner("none", "");
  }

  $("card-freshness").textContent = secs(s.freshness_s);
  const total = Object.values(rates).reduce((x, y) => x + y, 0);
  $("card-throughput").textContent = history.length > 1 ? `${num(total)}/s` : "-";
  const c = s.bus?.consumer ?? {};
  $("card-pending").textContent = s.bus.up ? num(c.pending) : "?";
  $("card-ack-pending").textContent = s.bus.up ? num(c.ack_pending) : "?";
  $("card-dlq").textContent = s.bus.up ? num(s.bus.dlq?.messages) : "?";
  $("card-staged").textContent = num(s.stage.staged);

  const rows = s.tables.map((t: Json) => {
    const paused = t.state === "paused";
    const action = paused ? "resume" : "pause";
    return `<tr data-table-row="${esc(t.table)}">
      <td><span style="color:${color(t.table)}">■</span> ${esc(t.table)}</td>
      <td data-state="${esc(t.state)}" data-testid="state-${esc(t.table)}">${esc(t.state)}</td>
      <td data-testid="freshness-${esc(t.table)}" data-value="${t.freshness_s ?? ""}">${secs(t.freshness_s)}</td>
      <td>${secs(t.lag_s)}</td>
      <td>${secs(t.capture_lag_s)}</td>
      <td>${rates[t.table] === undefined ? "-" : num(rates[t.table]) + "/s"}</td>
      <td>${num(t.checkpoint_seq)}</td>
      <td>${num(t.stream_last_seq)}</td>
      <td>${num(t.upserts)}</td>
      <td>${num(t.deletes)}</td>
      <td>${num(t.skipped_duplicates + t.skipped_stale)}</td>
      <td>${clock(t.last_commit_ms)}</td>
      <td><button data-action="${action}" data-table="${esc(t.table)}"
        title="${esc(t.paused ?? "")}">${action}</button></td>
    </tr>`;
  });
  $("tables-body").innerHTML = rows.length
    ? rows.join("")
    : `<tr><td colspan="13" class="muted">no table yet</td></tr>`;

  $("commits-body").innerHTML = s.recent_commits
    .slice(0, 12)
    .map(
      (c: Json) => `<tr><td>${clock(c.committed_at_ms)}</td><td>${esc(c.table)}</td>
        <td>${num(c.events)}</td><td>${num(c.upserts)}</td><td>${num(c.deletes)}</td>
        <td>${num(c.seq)}</td><td>${num(c.duration_ms)} ms</td></tr>`,
    )
    .join("");

  $("processes-body").innerHTML = Object.entries(s.processes as Json)
    .map(
      ([name, p]: [string, Json]) => `<tr><td>${esc(name)}</td>
        <td data-state="${p.up ? "healthy" : "down"}">${p.up ? "up" : "down"}</td>
        <td>${esc(p.state)}</td><td>${secs(p.heartbeat_age_s)}</td><td>${esc(p.pid ?? "-")}</td></tr>`,
    )
    .join("");

  $("errors").innerHTML = s.errors.length
    ? s.errors
        .map((e: Json) => `<li>${esc(e.source)}${e.table ? " " + esc(e.table) : ""}: ${esc(e.message)}</li>`)
        .join("")
    : `<li class="muted">none</li>`;

  drawCharts(s.tables.map((t: Json) => t.table));
}

function drawSeries(svgId: string, series: Record<string, (number | null)[]>, times: number[]): void {
  const svg = $(svgId);
  const w = 600;
  const h = 160;
  const values = Object.values(series).flat().filter((v): v is number => v !== null);
  const max = Math.max(1, ...values) * 1.1;
  const t0 = times[0] ?? 0;
  const span = Math.max(1, (times[times.length - 1] ?? 1) - t0);
  const paths = Object.entries(series).map(([table, ys]) => {
    let d = "";
    ys.forEach((y, i) => {
      if (y === null) return;
      const x = ((times[i] - t0) / span) * w;
      d += `${d ? "L" : "M"}${x.toFixed(1)},${(h - (y / max) * (h - 10)).toFixed(1)}`;
    });
    return `<path d="${d}" fill="none" stroke="${color(table)}" stroke-width="2" />`;
  });
  svg.innerHTML =
    `<text x="4" y="12" fill="#8b96a5" font-size="11">${max.toFixed(1)}</text>` + paths.join("");
}

function drawCharts(tables: string[]): void {
  const times = history.map((p) => p.t);
  const rate: Record<string, (number | null)[]> = {};
  const fresh: Record<string, (number | null)[]> = {};
  for (const table of tables) {
    rate[table] = history.map((p, i) => {
      if (i === 0) return null;
      const prev = history[i - 1];
      const dt = (p.t - prev.t) / 1000;
      const a = prev.events[table];
      const b = p.events[table];
      return dt > 0 && a !== undefined && b !== undefined ? Math.max(0, (b - a) / dt) : null;
    });
    fresh[table] = history.map((p) => p.freshness[table] ?? null);
  }
  drawSeries("chart-throughput", rate, times);
  drawSeries("chart-freshness", fresh, times);
  $("legend").innerHTML = tables
    .map((t) => `<span style="--c:${color(t)}">${esc(t)}</span>`)
    .join("");
}

function unreachable(reason: string): void {
  const state = $("pipeline-state");
  state.textContent = "unreachable";
  state.dataset.state = "unreachable";
  const since = lastOk ? ` — last update ${secs((Date.now() - lastOk) / 1000)} ago` : "";
  setBanner("unreachable", `API unreachable (${reason})${since}; showing the last data.`);
}

async function poll(): Promise<void> {
  try {
    const resp = await fetch(`${apiBase}/api/status`, {
      headers: headers(),
      cache: "no-store",
      signal: AbortSignal.timeout(Math.max(5000, intervalMs * 3)),
    });
    if (resp.status === 401) {
      unreachable("unauthorized: open the page with ?token=<api token>");
      return;
    }
    if (!resp.ok) {
      unreachable(`HTTP ${resp.status}`);
      return;
    }
    const status = await resp.json();
    lastOk = Date.now();
    render(status);
    syncTableChoices(status);
    void pollDeadLetters(status);
    $("last-updated").textContent = `updated ${new Date(lastOk).toISOString().slice(11, 19)} UTC`;
  } catch (err) {
    unreachable(err instanceof Error ? err.message : String(err));
  }
}

/** Every state-changing request: the API refuses one without a JSON Content-Type (a page of
 * another origin cannot send that without a preflight, which the API never answers). */
async function post(path: string, body: Json = {}): Promise<Response> {
  return fetch(`${apiBase}${path}`, {
    method: "POST",
    headers: { ...headers(), "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
}

async function control(action: string, table: string): Promise<void> {
  const body = action === "pause" ? { reason: "from the dashboard" } : {};
  await post(`/api/tables/${encodeURIComponent(table)}/${action}`, body);
  await poll();
}

let polls = 0;
let explorerNext: number | null = null;

/** The dead letters (every 5th poll: they change rarely), with replay / discard buttons. */
async function pollDeadLetters(s: Json): Promise<void> {
  if (!s.bus.up) return;
  if (polls++ % 5 !== 0 && String(s.bus.dlq?.messages) === $("dlq-body").dataset.count) return;
  const resp = await fetch(`${apiBase}/api/dlq?limit=20`, { headers: headers(), cache: "no-store" });
  if (!resp.ok) return;
  const page = await resp.json();
  $("dlq-body").dataset.count = String(s.bus.dlq?.messages);
  $("dlq-body").innerHTML = page.messages.length
    ? page.messages
        .map(
          (m: Json) => `<tr data-dlq="${m.dlq_seq}"><td>${m.dlq_seq}</td><td>${clock(m.time_ms)}</td>
          <td>${esc(m.original_subject)}</td><td>${num(m.original_seq)}</td>
          <td title="${esc(m.reason)}">${esc(String(m.reason ?? "").slice(0, 60))}</td>
          <td><button data-dlq-action="replay" data-seq="${m.dlq_seq}">replay</button>
          <button data-dlq-action="discard" data-seq="${m.dlq_seq}">discard</button></td></tr>`,
        )
        .join("")
    : `<tr><td colspan="6" class="muted">none</td></tr>`;
}

async function deadLetter(action: string, seq: string): Promise<void> {
  if (action === "discard" && !confirm(`discard dead letter ${seq} for good?`)) return;
  await post(`/api/dlq/${seq}/${action}`);
  polls = 0;
  await poll();
}

/** A page of the stream for the chosen table, from the chosen sequence. */
async function explore(startSeq: number | null): Promise<void> {
  const q = new URLSearchParams({ limit: "20" });
  const table = ($("explorer-table") as HTMLSelectElement).value;
  if (table) q.set("table", table);
  if (startSeq) q.set("start_seq", String(startSeq));
  const resp = await fetch(`${apiBase}/api/messages?${q}`, { headers: headers(), cache: "no-store" });
  if (!resp.ok) {
    $("messages-body").innerHTML = `<tr><td colspan="6">HTTP ${resp.status}</td></tr>`;
    return;
  }
  const page = await resp.json();
  explorerNext = page.next_seq;
  $("explorer-next").hidden = !explorerNext;
  $("messages-body").innerHTML = page.messages
    .map(
      (m: Json) => `<tr data-seq="${m.seq}"><td>${m.seq}</td><td>${clock(m.time_ms)}</td>
        <td>${esc(m.table ?? m.subject)}</td><td>${num(m.size)}</td>
        <td data-state="${esc(m.state)}">${esc(m.state)}</td><td>${m.in_lake ? "yes" : "no"}</td></tr>`,
    )
    .join("");
}

function syncTableChoices(s: Json): void {
  const select = $("explorer-table") as HTMLSelectElement;
  const have = new Set(Array.from(select.options).map((o) => o.value));
  for (const t of s.tables) {
    if (!have.has(t.table)) select.add(new Option(t.table, t.table));
  }
}

export function start(): void {
  $("interval").textContent = String(intervalMs / 1000);
  $("tables-body").addEventListener("click", (ev) => {
    const target = ev.target as HTMLElement;
    if (target.tagName === "BUTTON" && target.dataset.action && target.dataset.table) {
      void control(target.dataset.action, target.dataset.table);
    }
  });
  $("dlq-body").addEventListener("click", (ev) => {
    const target = ev.target as HTMLElement;
    if (target.dataset.dlqAction && target.dataset.seq) {
      void deadLetter(target.dataset.dlqAction, target.dataset.seq);
    }
  });
  $("explorer").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const seq = Number(($("explorer-seq") as HTMLInputElement).value) || null;
    void explore(seq);
  });
  $("explorer-next").addEventListener("click", () => void explore(explorerNext));
  const loop = async (): Promise<void> => {
    await poll();
    setTimeout(loop, intervalMs);
  };
  void loop();
}
