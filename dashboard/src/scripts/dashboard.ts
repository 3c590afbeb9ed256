// The dashboard's behaviour: polls GET /api/status for the current state and the history
// routes for the charts (built by the server from the durable record, so a reload shows the
// past at once), and draws the charts with uPlot.
//
// Views: "#/" the overview, "#/table/<db>.<table>" one table, "#/routes" the routes (GET
// /api/routes) and "#/routes/<name>" with that route's messages (GET /api/routes/<name>/messages).
// URL parameters: ?interval=<ms> (status poll, default 2000), ?window=<s> (chart window,
// default 3600), ?token=<bearer token> (kept in localStorage; needed when the server requires
// one), ?api=<base url> (default: same origin).

import uPlot from "uplot";

type Json = Record<string, any>;
type Series = (number | null)[];

const params = new URLSearchParams(location.search);
const intervalMs = Math.max(200, Number(params.get("interval") ?? 2000) || 2000);
/** The charts change per bucket (10 s at the finest): no need to ask more often. */
const historyEveryMs = Math.max(intervalMs, 5000);
const apiBase = (params.get("api") ?? "").replace(/\/$/, "");
if (params.get("token")) localStorage.setItem("tidelake-token", params.get("token") ?? "");
const token = localStorage.getItem("tidelake-token");
let windowS = Number(params.get("window") ?? localStorage.getItem("tidelake-window") ?? 3600) || 3600;

const C = {
  blue: "#58a6ff",
  green: "#3fb950",
  yellow: "#d29922",
  red: "#f85149",
  magenta: "#bc8cff",
  cyan: "#39c5cf",
  muted: "#8b96a5",
  grid: "#253040",
};

let lastOk: number | null = null;
let lastStatus: Json | null = null;

const $ = (id: string): HTMLElement => document.getElementById(id) as HTMLElement;

function esc(v: unknown): string {
  return String(v ?? "").replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function secs(v: number | null | undefined): string {
  if (v === null || v === undefined || Number.isNaN(v)) return "-";
  if (v < 1) return `${Math.round(v * 1000)} ms`;
  if (v < 10) return `${v.toFixed(1)} s`;
  if (v < 120) return `${Math.round(v)} s`;
  if (v < 7200) return `${Math.round(v / 60)} min`;
  return `${(v / 3600).toFixed(1)} h`;
}

function num(v: number | null | undefined): string {
  return v === null || v === undefined ? "-" : Math.round(v).toLocaleString("en");
}

/** A rate with a sensible number of digits. */
function rate(v: number | null | undefined): string {
  if (v === null || v === undefined) return "-";
  if (v === 0) return "0/s";
  if (v < 10) return `${v.toFixed(1)}/s`;
  return `${num(v)}/s`;
}

function clock(ms: number | null | undefined): string {
  return ms ? new Date(ms).toISOString().slice(11, 19) : "-";
}

function headers(): HeadersInit {
  return token ? { Authorization: `Bearer ${token}` } : {};
}

async function getJson(path: string): Promise<Response> {
  return fetch(`${apiBase}${path}`, {
    headers: headers(),
    cache: "no-store",
    signal: AbortSignal.timeout(Math.max(5000, intervalMs * 3)),
  });
}

function setBanner(kind: string, text: string): void {
  const banner = $("banner");
  banner.dataset.kind = kind;
  banner.textContent = text;
  banner.hidden = kind === "none";
}

// --- charts ----------------------------------------------------------------------------------

interface Line {
  label: string;
  color: string;
  /** Draw across buckets without a value (lag and duration exist only where commits are). */
  span?: boolean;
  fill?: boolean;
}

interface Chart {
  plot: uPlot | null;
  el: HTMLElement;
  lines: Line[];
  fmt: (v: number) => string;
  x: [number, number];
  /** Counts: ticks on whole numbers only. */
  integer: boolean;
}

const charts: Record<string, Chart> = {};

function utc(ts: number): Date {
  return uPlot.tzDate(new Date(ts * 1000), "Etc/UTC");
}

/** An x tick: "HH:MM" in UTC, or "MM-DD" at midnight. */
function timeLabel(ts: number): string {
  const iso = new Date(ts * 1000).toISOString();
  const hm = iso.slice(11, 16);
  return hm === "00:00" ? iso.slice(5, 10) : hm;
}

const INTEGER_STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 1e6, 1e7];

function chart(id: string, lines: Line[], fmt: (v: number) => string, integer = false): Chart {
  if (charts[id]) return charts[id];
  const c: Chart = { plot: null, el: $(id), lines, fmt, x: [0, 1], integer };
  charts[id] = c;
  return c;
}

function build(c: Chart, data: uPlot.AlignedData): uPlot {
  const axis = {
    stroke: C.muted,
    grid: { stroke: C.grid, width: 1 },
    ticks: { stroke: C.grid, width: 1 },
    font: "11px system-ui, sans-serif",
  };
  const opts: uPlot.Options = {
    width: Math.max(200, c.el.clientWidth),
    height: 190,
    tzDate: utc,
    cursor: { drag: { x: false, y: false } },
    scales: {
      x: { time: true, range: () => c.x },
      y: { range: (_u, _min, max) => [0, max > 0 ? max * 1.15 : 1] },
    },
    axes: [
      {
        ...axis,
        // Our own labels (UTC, the day where a day starts), also kept for the browser tests:
        // uPlot draws axes on a canvas.
        values: (_u, ticks) => {
          const labels = ticks.map(timeLabel);
          c.el.dataset.xTicks = labels.join(" ");
          return labels;
        },
      },
      {
        ...axis,
        size: 64,
        ...(c.integer ? { incrs: INTEGER_STEPS } : {}),
        values: (_u, ticks) => {
          const labels = ticks.map((v) => c.fmt(v));
          c.el.dataset.yTicks = labels.join(" ");
          return labels;
        },
      },
    ],
    series: [
      { value: (_u, v) => (v == null ? "-" : utc(v).toISOString().slice(11, 19)) },
      ...c.lines.map((l) => ({
        label: l.label,
        stroke: l.color,
        width: 2,
        fill: l.fill ? `${l.color}26` : undefined,
        spanGaps: l.span ?? false,
        points: { size: 5 },
        value: (_u: uPlot, v: number | null) => (v == null ? "-" : c.fmt(v)),
      })),
    ],
  };
  const plot = new uPlot(opts, data, c.el);
  new ResizeObserver(() => {
    const w = Math.max(200, c.el.clientWidth);
    if (Math.abs(w - plot.width) > 2) plot.setSize({ width: w, height: 190 });
  }).observe(c.el);
  return plot;
}

/** Draw ``series`` (one per line) over the bucket times ``t`` (Unix s) of a history answer. */
function draw(c: Chart, h: Json, series: Series[]): void {
  const t: number[] = h.t;
  c.x = [t[0], h.now_ms / 1000];
  const data = [t, ...series] as uPlot.AlignedData;
  // A chart built while its view is hidden gets its width from the ResizeObserver once shown.
  if (c.plot === null) c.plot = build(c, data);
  else c.plot.setData(data);
  // What the browser tests read: how many buckets hold a value, and the oldest of them.
  const known = t.filter((_x, i) => series.some((s) => s[i] !== null && s[i] !== undefined));
  c.el.dataset.points = String(known.length);
  c.el.classList.toggle("empty", known.length === 0);
  c.el.dataset.firstMs = known.length ? String(known[0] * 1000) : "";
}

const fmtRate = (v: number): string => (v >= 1000 ? `${(v / 1000).toFixed(1)}k/s` : `${+v.toFixed(2)}/s`);
const fmtSecs = (v: number): string => secs(v);
const fmtCount = (v: number): string => num(v);

function drawOverview(h: Json): void {
  const s = h.series;
  draw(
    chart("chart-throughput", [
      { label: "staged", color: C.blue },
      { label: "committed", color: C.green, fill: true },
    ], fmtRate),
    h,
    [s.staged_per_s, s.committed_per_s],
  );
  draw(
    chart("chart-lag", [
      { label: "p99", color: C.yellow, span: true },
      { label: "p50", color: C.blue, span: true },
    ], fmtSecs),
    h,
    [s.lag_p99_s, s.lag_p50_s],
  );
  draw(
    chart("chart-duration", [
      { label: "max", color: C.red, span: true },
      { label: "p50", color: C.magenta, span: true },
    ], fmtSecs),
    h,
    [s.duration_max_s, s.duration_p50_s],
  );
  draw(
    chart("chart-dlq", [
      { label: "dead letters", color: C.red, fill: true },
      { label: "consumer pending", color: C.cyan },
    ], fmtCount, true),
    h,
    [s.dlq_messages, s.consumer_pending],
  );
  const last = [...s.committed_per_s].reverse().find((v: number | null) => v !== null);
  $("card-throughput").textContent = rate(last ?? null);
  const since = h.sampled_since_ms;
  $("history-note").textContent =
    `window ${secs(h.window_s)}, ${h.step_s} s buckets, rates averaged over ${secs(h.smooth_s)}; ` +
    `${num(h.commits_in_window)} commits in the window (commits.jsonl)` +
    (since ? `; staged, dead letters and backlog sampled by serve since ${new Date(since).toISOString().slice(0, 16).replace("T", " ")} UTC` : "; serve has taken no sample yet");
}

function drawTable(h: Json): void {
  const s = h.series;
  draw(chart("chart-table-rate", [{ label: "committed", color: C.green, fill: true }], fmtRate), h, [
    s.committed_per_s,
  ]);
  draw(
    chart("chart-table-lag", [
      { label: "p99", color: C.yellow, span: true },
      { label: "p50", color: C.blue, span: true },
    ], fmtSecs),
    h,
    [s.lag_p99_s, s.lag_p50_s],
  );
  draw(
    chart("chart-table-duration", [
      { label: "max", color: C.red, span: true },
      { label: "p50", color: C.magenta, span: true },
    ], fmtSecs),
    h,
    [s.duration_max_s, s.duration_p50_s],
  );
  $("table-commits-body").innerHTML = h.recent_commits.length
    ? h.recent_commits
        .map(
          (c: Json) => `<tr><td>${clock(c.committed_at_ms)}</td><td>${esc(c.instant ?? "-")}</td>
          <td>${num(c.events)}</td><td>${num(c.upserts)}</td><td>${num(c.deletes)}</td>
          <td>${num(c.seq)}</td>
          <td>${c.max_commit_ts_ms ? secs((c.committed_at_ms - c.max_commit_ts_ms) / 1000) : "-"}</td>
          <td>${num(c.duration_ms)} ms</td></tr>`,
        )
        .join("")
    : `<tr><td colspan="8" class="muted">no commit yet</td></tr>`;
  $("table-ddl-body").innerHTML = h.ddl.length
    ? h.ddl
        .map(
          (d: Json) => `<tr data-ddl-seq="${d.seq}"><td>${clock(d.committed_at_ms)}</td>
          <td>${esc(d.ddl_type ?? "")}</td><td>${num(d.seq)}</td>
          <td class="wrap">${esc(d.ddl_action ?? "")}${
            d.ddl_changes?.length ? `: ${esc(d.ddl_changes.join(", "))}` : ""
          }</td></tr>`,
        )
        .join("")
    : `<tr><td colspan="4" class="muted">none in the window</td></tr>`;
  const blocked = $("table-blocked");
  blocked.hidden = !h.blocked_ddl;
  if (h.blocked_ddl) {
    const b = h.blocked_ddl;
    blocked.textContent = `waits on the DDL at seq ${b.seq}: ${b.ddl ?? ""} — ${b.reason} (tidelake table skip-ddl)`;
  }
}

async function pollHistory(): Promise<void> {
  if (currentView() === "routes") return;
  const table = currentTable();
  const path = table
    ? `/api/tables/${encodeURIComponent(table)}/history?window=${windowS}`
    : `/api/history?window=${windowS}`;
  try {
    const resp = await getJson(path);
    if (!resp.ok) return;
    const h = await resp.json();
    if (table !== currentTable()) return; // the view changed meanwhile
    if (table) drawTable(h);
    else drawOverview(h);
  } catch {
    // The status poll reports an unreachable API.
  }
}

// --- the status ------------------------------------------------------------------------------

function render(s: Json): void {
  lastStatus = s;
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
  const c = s.bus?.consumer ?? {};
  $("card-pending").textContent = s.bus.up ? num(c.pending) : "?";
  $("card-ack-pending").textContent = s.bus.up ? num(c.ack_pending) : "?";
  $("card-dlq").textContent = s.bus.up ? num(s.bus.dlq?.messages) : "?";
  $("card-staged").textContent = num(s.stage.staged);

  const rows = s.tables.map((t: Json) => {
    const action = t.state === "paused" ? "resume" : "pause";
    return `<tr data-table-row="${esc(t.table)}">
      <td><a class="name" href="#/table/${encodeURIComponent(t.table)}" title="${esc(t.table)}"
        data-testid="link-${esc(t.table)}">${esc(t.table)}</a></td>
      <td data-state="${esc(t.state)}" data-testid="state-${esc(t.table)}">${esc(t.state)}</td>
      <td data-testid="freshness-${esc(t.table)}" data-value="${t.freshness_s ?? ""}">${secs(t.freshness_s)}</td>
      <td>${secs(t.lag_s)}</td>
      <td>${secs(t.capture_lag_s)}</td>
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
    : `<tr><td colspan="12" class="muted">no table yet</td></tr>`;

  $("commits-body").innerHTML = s.recent_commits
    .slice(0, 12)
    .map(
      (c: Json) => `<tr><td>${clock(c.committed_at_ms)}</td>
        <td><a class="name" href="#/table/${encodeURIComponent(c.table)}" title="${esc(c.table)}">${esc(c.table)}</a></td>
        <td>${num(c.events)}</td><td>${num(c.upserts)}</td><td>${num(c.deletes)}</td>
        <td>${num(c.seq)}</td><td>${num(c.duration_ms)} ms</td></tr>`,
    )
    .join("");

  $("processes-body").innerHTML = Object.entries(s.processes as Json)
    .map(
      ([name, p]: [string, Json]) => `<tr><td>${esc(name)}</td>
        <td data-state="${p.up ? "healthy" : "down"}">${p.up ? "up" : "down"}</td>
        <td>${esc(p.state)}</td><td data-testid="activity-${esc(name)}">${esc(p.activity ?? "-")}</td>
        <td>${secs(p.heartbeat_age_s)}</td><td>${esc(p.pid ?? "-")}</td></tr>`,
    )
    .join("");

  renderCapture(s.capture ?? null);

  $("errors").innerHTML = s.errors.length
    ? s.errors
        .map((e: Json) => `<li>${esc(e.source)}${e.table ? " " + esc(e.table) : ""}: ${esc(e.message)}</li>`)
        .join("")
    : `<li class="muted">none</li>`;

  renderTablePage();
}

function bytes(v: number | null | undefined): string {
  if (v === null || v === undefined) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return i === 0 ? `${Math.round(v)} B` : `${v.toFixed(1)} ${units[i]}`;
}

/** tidelake's own capture: its lag (capture/lag.py), snapshot progress and skipped tables. */
function renderCapture(c: Json | null): void {
  const box = $("capture");
  box.hidden = c === null;
  if (c === null) return;
  const lag: Json = c.lag ?? {};
  const postgres = c.source === "postgres";
  $("capture-source").textContent = `${c.source ?? "?"} · ${c.phase ?? "?"}`;
  $("capture-behind").textContent = secs(lag.seconds);
  $("capture-lag-label").textContent = postgres ? "slot lag" : "binlog lag";
  $("capture-lag-bytes").textContent = bytes(lag.bytes);
  const retained = $("capture-retained");
  retained.textContent = postgres ? bytes(lag.retained_wal_bytes) : "-";
  // wal_status unreserved/lost: the server removes WAL the slot needs (pg_replication_slots).
  const atRisk = lag.wal_status === "unreserved" || lag.wal_status === "lost";
  retained.dataset.state = atRisk ? "down" : "";
  $("capture-gtid").textContent = lag.gtid_behind === null || lag.gtid_behind === undefined ? "-" : num(lag.gtid_behind);
  const note: string[] = [];
  if (lag.error) note.push(`lag unknown: ${lag.error}`);
  if (lag.wal_status) note.push(`slot wal_status ${lag.wal_status}`);
  if (lag.safe_wal_size !== null && lag.safe_wal_size !== undefined) note.push(`safe WAL size ${bytes(lag.safe_wal_size)}`);
  if (lag.at_ms) note.push(`measured ${clock(lag.at_ms)}`);
  $("capture-note").textContent = note.join(" · ");

  const snaps = Object.entries((c.snapshot?.tables ?? {}) as Json);
  $("capture-snapshots-box").hidden = snaps.length === 0;
  $("capture-snapshots-body").innerHTML = snaps
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([table, t]: [string, Json]) => {
      const total = t.rows_total;
      const pct = total ? `${Math.min(100, Math.round((100 * (t.rows_done ?? 0)) / total))} %` : "-";
      return `<tr data-testid="snapshot-${esc(table)}"><td>${esc(table)}</td>
        <td data-state="${t.state === "failed" ? "down" : t.state === "done" ? "healthy" : "catching_up"}">${esc(t.state)}</td>
        <td>${num(t.rows_done)}</td><td>${num(total)}</td><td>${pct}</td><td>${num(t.chunks_done)}</td>
        <td>${clock(t.updated_ms)}</td></tr>`;
    })
    .join("");

  const skipped = Object.entries((c.skipped ?? {}) as Json);
  const list = $("capture-skipped");
  list.hidden = skipped.length === 0;
  list.innerHTML = skipped
    .map(([table, reason]) => `<li data-testid="skipped-${esc(table)}">skipped ${esc(table)}: ${esc(reason)}</li>`)
    .join("");
}

/** The table page's current state (from the last status). */
function renderTablePage(): void {
  const name = currentTable();
  if (!name || !lastStatus) return;
  const t = lastStatus.tables.find((x: Json) => x.table === name);
  $("table-title").textContent = name;
  const state = $("table-state");
  state.textContent = t ? t.state : "unknown table";
  state.dataset.state = t ? t.state : "unknown";
  const button = $("table-control") as HTMLButtonElement;
  button.hidden = !t;
  const action = t?.state === "paused" ? "resume" : "pause";
  button.textContent = action;
  button.dataset.action = action;
  button.dataset.table = name;
  const paused = $("table-paused");
  paused.hidden = !t?.paused;
  paused.textContent = t?.paused ? `paused: ${t.paused}` : "";
  $("tcard-freshness").textContent = secs(t?.freshness_s);
  $("tcard-lag").textContent = secs(t?.lag_s);
  $("tcard-checkpoint").textContent = num(t?.checkpoint_seq);
  $("tcard-stream").textContent = num(t?.stream_last_seq);
  $("tcard-schema").textContent = num(t?.schema_version);
  $("tcard-commits").textContent = t ? `${num(t.commits)} / ${num(t.events)}` : "-";
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
    const resp = await getJson("/api/status");
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
    syncTableChoices(status.tables.map((t: Json) => t.table));
    void pollDeadLetters(status);
    void pollRoutes();
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

/** The dead letters (every 5th poll: they change rarely), with replay / discard buttons. */
async function pollDeadLetters(s: Json): Promise<void> {
  if (!s.bus.up) return;
  if (polls++ % 5 !== 0 && String(s.bus.dlq?.messages) === $("dlq-body").dataset.count) return;
  const resp = await getJson("/api/dlq?limit=20");
  if (!resp.ok) return;
  const page = await resp.json();
  $("dlq-body").dataset.count = String(s.bus.dlq?.messages);
  $("dlq-body").innerHTML = page.messages.length
    ? page.messages
        .map(
          (m: Json) => `<tr data-dlq="${m.dlq_seq}"><td>${m.dlq_seq}</td><td>${clock(m.time_ms)}</td>
          <td class="ellipsis" title="${esc(m.original_subject)}">${esc(m.original_subject)}</td>
          <td>${num(m.original_seq)}</td>
          <td class="ellipsis" title="${esc(m.reason)}">${esc(m.reason)}</td>
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

/** Why a request failed, for the page: the API's own ``detail`` when it gave one. */
async function failure(resp: Response): Promise<string> {
  if (resp.status === 401) return "unauthorized: open the page with ?token=<api token>";
  let detail = "";
  try {
    const body = await resp.json();
    detail = typeof body.detail === "string" ? body.detail : "";
  } catch {
    // not JSON
  }
  return detail ? `HTTP ${resp.status}: ${detail}` : `HTTP ${resp.status}`;
}

// --- message explorers -----------------------------------------------------------------------

/** A message explorer: a form (the element ``id``, a table choice ``<id>-table``, a start
 * sequence ``<id>-seq``, a next-page button ``<id>-next``), the page's rows (``body``) and the
 * whole message beside them (the panel ``detail``). The overview's pages the stream as the
 * stager sees it, a route's as that route does. */
interface ExplorerSpec {
  id: string;
  body: string;
  detail: string;
  /** The page's API path (no query), or null when there is nothing to explore. */
  path: () => string | null;
  /** The row's cells after seq, time, table / subject and size. */
  cells: (m: Json) => string;
  /** The row's own attributes (a state to colour it by, say). */
  attrs?: (m: Json) => string;
  /** What the detail panel says of a message beyond the stream's own (from its row). */
  meta?: (m: Json) => [string, unknown][];
  /** Told of each page shown. */
  shown?: (page: Json) => void;
}

class Explorer {
  next: number | null = null;
  /** The start sequence of the page shown. */
  private start: number | null = null;
  private rows = new Map<string, Json>();
  /** Answers to an older request (another route chosen since) are dropped. */
  private asked = 0;
  private readonly columns: number;

  constructor(readonly spec: ExplorerSpec) {
    this.columns = ($(spec.body).closest("table")?.querySelectorAll("thead th").length ?? 1) || 1;
  }

  private say(text: string): void {
    $(this.spec.body).innerHTML = `<tr><td colspan="${this.columns}" class="muted">${esc(text)}</td></tr>`;
  }

  /** A page of the stream for the chosen table, from the chosen sequence. */
  async show(startSeq: number | null): Promise<void> {
    const path = this.spec.path();
    if (!path) return;
    const asked = ++this.asked;
    this.start = startSeq;
    const q = new URLSearchParams({ limit: "20" });
    const table = ($(`${this.spec.id}-table`) as HTMLSelectElement).value;
    if (table) q.set("table", table);
    if (startSeq) q.set("start_seq", String(startSeq));
    let resp: Response;
    try {
      resp = await getJson(`${path}?${q}`);
    } catch (err) {
      if (asked === this.asked) this.say(`API unreachable (${err instanceof Error ? err.message : err})`);
      return;
    }
    if (asked !== this.asked) return;
    if (!resp.ok) {
      this.say(await failure(resp));
      return;
    }
    const page = await resp.json();
    if (asked !== this.asked) return;
    this.next = page.next_seq;
    $(`${this.spec.id}-next`).hidden = !this.next;
    this.rows = new Map(page.messages.map((m: Json) => [String(m.seq), m]));
    $(this.spec.body).innerHTML = page.messages.length
      ? page.messages
          .map(
            (m: Json) => `<tr data-seq="${m.seq}" class="clickable"${this.spec.attrs?.(m) ?? ""}><td>${m.seq}</td>
        <td>${clock(m.time_ms)}</td>
        <td class="ellipsis" title="${esc(m.subject)}">${esc(m.table ?? m.subject)}</td><td>${num(m.size)}</td>
        ${this.spec.cells(m)}</tr>`,
          )
          .join("")
      : `<tr><td colspan="${this.columns}" class="muted">no message${startSeq ? ` from seq ${startSeq}` : ""}</td></tr>`;
    syncTableChoices(page.messages.map((m: Json) => m.table));
    this.spec.shown?.(page);
  }

  /** The page shown, again (after the route changed what it holds). */
  async refresh(): Promise<void> {
    if (!$(this.spec.body).childElementCount) return;
    await this.show(this.start);
  }

  /** Empty the page (another route chosen). */
  clear(): void {
    this.asked++;
    this.next = null;
    this.rows.clear();
    $(`${this.spec.id}-next`).hidden = true;
    $(this.spec.body).innerHTML = "";
    $(this.spec.detail).hidden = true;
  }

  /** The whole message beside the list: headers and payload, wrapped within the panel. */
  async detail(seq: string): Promise<void> {
    const d = this.spec.detail;
    const panel = $(d);
    panel.hidden = false;
    $(`${d}-title`).textContent = `message ${seq}`;
    let resp: Response;
    try {
      resp = await getJson(`/api/messages/${seq}`);
    } catch (err) {
      $(`${d}-meta`).innerHTML = "";
      $(`${d}-payload`).textContent = `API unreachable (${err instanceof Error ? err.message : err})`;
      return;
    }
    if (!resp.ok) {
      $(`${d}-meta`).innerHTML = "";
      $(`${d}-payload`).textContent = await failure(resp);
      return;
    }
    const m = await resp.json();
    const row = this.rows.get(seq);
    const meta: [string, unknown][] = [
      ["subject", m.subject],
      ["table", m.table],
      ["stored", m.time_ms ? new Date(m.time_ms).toISOString() : "-"],
      ["stager", m.state],
      ["size", `${num(m.size)} bytes`],
      ...(row && this.spec.meta ? this.spec.meta(row) : []),
      ...Object.entries(m.headers ?? {}),
    ];
    $(`${d}-meta`).innerHTML = meta.map(([k, v]) => `<dt>${esc(k)}</dt><dd>${esc(v)}</dd>`).join("");
    let payload = String(m.payload ?? "");
    try {
      payload = JSON.stringify(JSON.parse(payload), null, 2);
    } catch {
      // not JSON (a dead letter's cause, say): shown as it is
    }
    $(`${d}-payload`).textContent = payload;
  }

  bind(): void {
    const { id, body, detail } = this.spec;
    $(body).addEventListener("click", (ev) => {
      const row = (ev.target as HTMLElement).closest("tr");
      if (row?.dataset.seq) void this.detail(row.dataset.seq);
    });
    $(`${detail}-close`).addEventListener("click", () => {
      $(detail).hidden = true;
    });
    $(id).addEventListener("submit", (ev) => {
      ev.preventDefault();
      const seq = Number(($(`${id}-seq`) as HTMLInputElement).value) || null;
      void this.show(seq);
    });
    $(`${id}-next`).addEventListener("click", () => void this.show(this.next));
  }
}

/** The stream as the stager sees it: acked, delivered or pending, and in the lake or not. */
const streamExplorer = new Explorer({
  id: "explorer",
  body: "messages-body",
  detail: "message-detail",
  path: () => "/api/messages",
  cells: (m) => `<td data-state="${esc(m.state)}">${esc(m.state)}</td><td>${m.in_lake ? "yes" : "no"}</td>`,
});

/** What a route did with a message (route/runner.py route_state). */
const ROUTE_STATES: Record<string, string> = {
  applied: "applied",
  in_flight: "in flight",
  pending: "pending",
  dead_lettered: "dead-lettered",
};

/** The stream as the chosen route sees it: applied, in flight, pending or dead-lettered. */
const routeExplorer = new Explorer({
  id: "route-explorer",
  body: "route-messages-body",
  detail: "route-message-detail",
  path: () => {
    const name = currentRoute();
    return name ? `/api/routes/${encodeURIComponent(name)}/messages` : null;
  },
  attrs: (m) => ` data-route-state="${esc(m.route_state)}"`,
  cells: (m) => `<td class="left" data-state="${esc(m.route_state)}" data-testid="msg-route-state-${m.seq}">${esc(
    ROUTE_STATES[m.route_state] ?? m.route_state,
  )}</td>
        <td class="ellipsis" title="${esc(m.route_reason ?? "")}">${esc(m.route_reason ?? "")}</td>`,
  meta: (m) => [
    ["route", ROUTE_STATES[m.route_state] ?? m.route_state],
    ...(m.route_reason ? ([["dead-letter reason", m.route_reason]] as [string, unknown][]) : []),
  ],
  shown: (page) => {
    const counts = new Map<string, number>();
    for (const m of page.messages) counts.set(m.route_state, (counts.get(m.route_state) ?? 0) + 1);
    $("route-explorer-summary").textContent = page.messages.length
      ? "this page: " +
        Object.keys(ROUTE_STATES)
          .filter((k) => counts.get(k))
          .map((k) => `${counts.get(k)} ${ROUTE_STATES[k]}`)
          .join(" · ")
      : "";
  },
});

/** The explorers' table choices: the status's tables and those seen on a page (a route may
 * take a table the lake has not got yet). */
function syncTableChoices(tables: (string | null | undefined)[]): void {
  for (const id of ["explorer-table", "route-explorer-table"]) {
    const select = $(id) as HTMLSelectElement;
    const have = new Set(Array.from(select.options).map((o) => o.value));
    for (const t of tables) {
      if (t && !have.has(t)) {
        select.add(new Option(t, t));
        have.add(t);
      }
    }
  }
}

// --- routes ----------------------------------------------------------------------------------

/** A route's state: paused (in the config or at run time), not started (no consumer on the
 * bus yet: its process never ran) or running (its consumer exists). */
function routeState(r: Json): string {
  if (r.paused) return "paused";
  return r.exists ? "running" : "not started";
}

let lastRoutes: Json[] | null = null;

function routesNote(text: string): void {
  const note = $("routes-note");
  note.hidden = !text;
  note.textContent = text;
}

/** The routes (GET /api/routes), while their page is shown; on a failure the page says why and
 * keeps the last rows. */
async function pollRoutes(): Promise<void> {
  if (currentView() !== "routes") return;
  let resp: Response;
  try {
    resp = await getJson("/api/routes");
  } catch (err) {
    routesNote(`routes unknown: API unreachable (${err instanceof Error ? err.message : err})`);
    return;
  }
  if (!resp.ok) {
    routesNote(`routes unknown: ${await failure(resp)}`);
    return;
  }
  const data = await resp.json();
  routesNote("");
  lastRoutes = data.routes;
  renderRoutes();
}

function renderRoutes(): void {
  if (lastRoutes === null) return;
  const chosen = currentRoute();
  const rows = lastRoutes.map((r: Json) => {
    const state = routeState(r);
    const action = r.paused ? "resume" : "pause";
    const n = esc(r.name);
    return `<tr data-route-row="${n}"${r.name === chosen ? ' class="chosen"' : ""}>
      <td><a class="name" href="#/routes/${encodeURIComponent(r.name)}" title="${n}: its messages"
        data-testid="route-link-${n}">${n}</a></td>
      <td class="left">${esc(r.sink)}</td>
      <td class="left" data-state="${state.replace(" ", "_")}" data-testid="route-state-${n}"
        title="${r.exists ? "its consumer is on the bus" : "no consumer on the bus yet"}">${state}</td>
      <td data-testid="route-acked-${n}">${r.exists ? num(r.acked_seq) : "-"}</td>
      <td>${r.exists ? num(r.delivered_seq) : "-"}</td>
      <td data-testid="route-pending-${n}">${r.exists ? num(r.pending) : "-"}</td>
      <td data-testid="route-inflight-${n}">${r.exists ? num(r.in_flight) : "-"}</td>
      <td data-testid="route-dlq-${n}"${r.dead_letters ? ' data-state="dead_lettered"' : ""}>${num(r.dead_letters)}</td>
      <td class="actions"><button data-route-action="${action}" data-route="${n}"
        data-testid="route-${action}-${n}">${action}</button>
      <button data-route-action="reprocess" data-route="${n}" data-testid="route-reprocess-${n}"
        ${r.dead_letters ? "" : "disabled"} title="apply its dead letters through the sink again">re-process dead letters</button></td>
    </tr>`;
  });
  $("routes-body").innerHTML = rows.length
    ? rows.join("")
    : `<tr><td colspan="9" class="muted">no route (routes in the config, or tidelake route add)</td></tr>`;
  const route = chosen ? lastRoutes.find((r: Json) => r.name === chosen) : null;
  if (chosen) {
    const title = $("route-title");
    title.textContent = chosen;
    title.dataset.state = route ? routeState(route).replace(" ", "_") : "unknown";
    title.title = route ? `${route.sink} · ${routeState(route)}` : "no such route";
  }
}

function routesResult(kind: string, text: string): void {
  const box = $("routes-result");
  box.dataset.kind = kind;
  box.textContent = text;
  box.hidden = kind === "none";
}

async function routeAction(action: string, name: string): Promise<void> {
  const path = `/api/routes/${encodeURIComponent(name)}/${action}`;
  if (action === "reprocess") {
    const route = lastRoutes?.find((r: Json) => r.name === name);
    const count = route ? `the ${num(route.dead_letters)} dead letters` : "the dead letters";
    if (!confirm(`re-process ${count} of route ${name} through its sink?`)) return;
    routesResult("paused", `route ${name}: re-processing its dead letters…`);
  }
  let resp: Response;
  try {
    resp = await post(path);
  } catch (err) {
    routesResult("unreachable", `route ${name}: ${action} failed: API unreachable (${err instanceof Error ? err.message : err})`);
    return;
  }
  if (!resp.ok) {
    routesResult("down", `route ${name}: ${action} failed: ${await failure(resp)}`);
  } else if (action === "reprocess") {
    const r = await resp.json();
    const reasons = Object.entries((r.reasons ?? {}) as Json).map(([k, v]) => `${k} ×${v}`);
    routesResult(
      r.still_failing ? "stale" : "ok",
      `route ${name}: re-processed — ${num(r.applied)} applied, ${num(r.still_failing)} still failing` +
        (reasons.length ? ` (${reasons.join(", ")})` : ""),
    );
  } else {
    routesResult("none", "");
  }
  await pollRoutes();
  if (action === "reprocess") void routeExplorer.refresh();
}

// --- views -----------------------------------------------------------------------------------

function currentTable(): string | null {
  const m = location.hash.match(/^#\/table\/(.+)$/);
  return m ? decodeURIComponent(m[1]) : null;
}

/** The route whose messages are shown (#/routes/<name>). */
function currentRoute(): string | null {
  const m = location.hash.match(/^#\/routes\/(.+)$/);
  return m ? decodeURIComponent(m[1]) : null;
}

function currentView(): "overview" | "table" | "routes" {
  if (currentTable() !== null) return "table";
  return /^#\/routes(\/|$)/.test(location.hash) ? "routes" : "overview";
}

let shownRoute: string | null = null;

function route(): void {
  const view = currentView();
  const table = currentTable();
  const chosen = currentRoute();
  $("view-overview").hidden = view !== "overview";
  $("view-table").hidden = view !== "table";
  $("view-routes").hidden = view !== "routes";
  for (const a of Array.from($("nav").querySelectorAll("a"))) {
    a.classList.toggle("active", a.dataset.nav === (view === "routes" ? "routes" : "overview"));
  }
  $("windows").hidden = view === "routes"; // no charts there
  document.title = table
    ? `${table} · tidelake`
    : view === "routes"
      ? `${chosen ? `${chosen} · ` : ""}routes · tidelake`
      : "tidelake";
  renderTablePage();
  $("route-messages").hidden = chosen === null;
  if (chosen !== shownRoute) {
    shownRoute = chosen;
    routeExplorer.clear();
    $("route-explorer-summary").textContent = "";
    if (chosen) void routeExplorer.show(Number(($("route-explorer-seq") as HTMLInputElement).value) || null);
  }
  renderRoutes();
  if (view === "routes") void pollRoutes();
  else void pollHistory();
}

function markWindow(): void {
  for (const b of Array.from($("windows").querySelectorAll("button"))) {
    b.classList.toggle("active", Number(b.dataset.window) === windowS);
  }
}

export function start(): void {
  $("interval").textContent = String(intervalMs / 1000);
  markWindow();
  $("windows").addEventListener("click", (ev) => {
    const w = Number((ev.target as HTMLElement).dataset.window);
    if (!w) return;
    windowS = w;
    localStorage.setItem("tidelake-window", String(w));
    markWindow();
    void pollHistory();
  });
  $("tables-body").addEventListener("click", (ev) => {
    const target = ev.target as HTMLElement;
    if (target.tagName === "BUTTON" && target.dataset.action && target.dataset.table) {
      void control(target.dataset.action, target.dataset.table);
    }
  });
  $("table-control").addEventListener("click", (ev) => {
    const b = ev.target as HTMLElement;
    if (b.dataset.action && b.dataset.table) void control(b.dataset.action, b.dataset.table);
  });
  $("dlq-body").addEventListener("click", (ev) => {
    const target = ev.target as HTMLElement;
    if (target.dataset.dlqAction && target.dataset.seq) {
      void deadLetter(target.dataset.dlqAction, target.dataset.seq);
    }
  });
  streamExplorer.bind();
  routeExplorer.bind();
  $("routes-body").addEventListener("click", (ev) => {
    const target = ev.target as HTMLElement;
    if (target.tagName === "BUTTON" && target.dataset.routeAction && target.dataset.route) {
      void routeAction(target.dataset.routeAction, target.dataset.route);
    }
  });
  window.addEventListener("hashchange", route);
  route();
  const loop = async (): Promise<void> => {
    await poll();
    setTimeout(loop, intervalMs);
  };
  void loop();
  setInterval(() => void pollHistory(), historyEveryMs);
}
