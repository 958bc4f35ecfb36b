// The overview (#/): the fleet over a period. Requests, tokens and dollars over time stacked
// by model, stops by reason, the top tasks, and the tasks stopped in the period, from one
// aggregated call (GET /admin/stats). Charts: uPlot (vendor/uplot, served by the gateway).
// The default period fits the data (from just before the first request or stop of the last
// 7 days to now), so fresh data fills the chart instead of a spike at its right edge. The
// legend shows each series' total for the period, or its value in the bucket under the cursor.
import { api, h, int, show, table, taskLink, usd, when } from "./lib.js";

// [span s, step s]; fit: chosen by the gateway from the data (GET /admin/stats?fit=true)
const PERIODS = { fit: null, "1h": [3600, 60], "24h": [86400, 1800], "7d": [7 * 86400, 3 * 3600] };
const PERIOD_WORDS = { fit: "fit to the data", "1h": "last 1h", "24h": "last 24h", "7d": "last 7d" };
const COLORS = ["#4a7bd0", "#e8a33d", "#3fa66b", "#c2417b", "#7a5bd0", "#2a9fb0", "#9aa3ad", "#cf222e"];
const REFRESH_MS = 10000;
// whole numbers on the axes of counts (no "0.25 stops")
const COUNT_INCRS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6, 2e6, 5e6,
  1e7, 2e7, 5e7, 1e8, 1e9, 1e10, 1e11, 1e12];
const AXIS_FONT = "12px system-ui, -apple-system, sans-serif";

/** Cumulative sums of the series, so each band is drawn on top of the ones below (stacking). */
export function stack(names, series) {
  const out = [];
  let acc = null;
  for (const name of names) {
    const ys = series[name];
    acc = acc ? acc.map((v, i) => v + ys[i]) : ys.slice();
    out.push(acc);
  }
  return out;
}

/** "1 stop", "2 stops". */
export function plural(n, word) { return `${int(n)} ${word}${n === 1 ? "" : "s"}`; }

/** What one legend entry reads: the series' own value in bucket `idx` (not the stacked
 * sum drawn), or its total over the period when no bucket is under the cursor. Pure. */
export function legendValue(values, idx, fmt) {
  return fmt(idx === null || idx === undefined ? sum(values) : values[idx]);
}

/** A bucket's start in words: the time, with the date when the period spans days. Pure. */
export function bucketWords(iso, stepS) {
  const opts = { hour: "2-digit", minute: "2-digit" };
  if (stepS < 60) opts.second = "2-digit";
  if (stepS >= 3600) Object.assign(opts, { month: "short", day: "numeric" });
  return new Date(iso).toLocaleString([], opts);
}

let measurer = null;
/** Width of the y axis: its widest label plus room for the ticks (uPlot's fixed 50 px cut
 * "$0.00002" short). */
function axisSize(u, values) {
  if (!values || !values.length) return 40;
  if (!measurer) { measurer = document.createElement("canvas").getContext("2d"); measurer.font = AXIS_FONT; }
  return Math.ceil(Math.max(...values.map((v) => measurer.measureText(String(v)).width))) + 22;
}

/** A color per name, by the names' order in `ranked` (one model keeps its color on every chart). */
function palette(ranked) {
  return (name) => COLORS[Math.max(0, ranked.indexOf(name)) % COLORS.length];
}

/** Names of `series`, biggest total first (ties by name). Pure. */
export function ranked(series) {
  return Object.keys(series).sort((a, b) => sum(series[b]) - sum(series[a]) || (a < b ? -1 : a > b ? 1 : 0));
}

function chart(id, title, stats, series, fmt, counts, colorOf) {
  const names = ranked(series);
  const box = h("div", { class: "card chart", id }, h("h3", {}, title));
  const total = names.reduce((t, n) => t + sum(series[n]), 0);
  if (!names.length || total === 0) { box.append(h("p", { class: "muted" }, "none yet in this period")); return box; }
  if (typeof uPlot === "undefined") { box.append(h("p", { class: "error" }, "the chart library did not load")); return box; }
  const xs = stats.buckets.map((b) => Date.parse(b) / 1000);
  const stacked = stack(names, series);
  // the biggest band (the total) first: later series are painted over it
  const order = names.map((_, i) => names.length - 1 - i);
  const yAxis = { values: (u, ticks) => ticks.map((v) => fmt(v)), size: axisSize, font: AXIS_FONT };
  if (counts) yAxis.incrs = COUNT_INCRS;
  const opts = {
    width: 520, height: 200, legend: { show: true }, cursor: { drag: { x: false, y: false } },
    scales: { x: { time: true }, y: { range: (u, min, max) => [0, max > 0 ? max : 1] } },
    axes: [{ font: AXIS_FONT }, yAxis],
    series: [{ label: "time", value: (u, v, s, idx) => (idx === null || idx === undefined ? "whole period"
      : bucketWords(stats.buckets[idx], stats.step_s)) },
    ...order.map((i) => ({ label: names[i], stroke: colorOf(names[i]), fill: colorOf(names[i]) + "55", width: 1,
      points: { show: false },
      value: (u, v, s, idx) => legendValue(series[names[i]], idx, fmt) }))],
  };
  const holder = h("div", {});
  box.append(holder, h("p", { class: "muted legend-note" },
    `total ${fmt(total)}; bands stacked; the legend shows each one's total, or its value at the cursor`));
  // eslint-disable-next-line no-new
  new uPlot(opts, [xs, ...order.map((i) => stacked[i])], holder);
  return box;
}

function sum(xs) { return xs.reduce((a, b) => a + b, 0); }

function topTable(id, rows) {
  return table(id, ["task", "requests", "tokens", "dollars"], rows.map((r) => h("tr", { "data-task": r.task_id },
    h("td", {}, taskLink(r.task_id)), h("td", {}, int(r.requests)), h("td", {}, int(r.tokens)),
    h("td", {}, usd(r.cost_usd)))), "none yet in this period");
}

/** The stats query of a period: fitted to the data, or the last span with its step. */
export function statsQuery(chosen, now) {
  const period = PERIODS[chosen];
  if (!period) return `/admin/stats?fit=true&until=${encodeURIComponent(now.toISOString())}`;
  const [span, step] = period;
  const since = new Date(now.getTime() - span * 1000);
  return `/admin/stats?since=${encodeURIComponent(since.toISOString())}`
    + `&until=${encodeURIComponent(now.toISOString())}&step=${step}`;
}

export async function overviewView(ctx) {
  const saved = sessionStorage.getItem("taskgate.period");
  const chosen = saved in PERIODS ? saved : "fit";
  const stats = await api("GET", statsQuery(chosen, new Date()));
  if (location.hash.length > 2 && location.hash !== "#/") return;  // the operator moved on meanwhile
  const select = h("select", { id: "period", onchange: () => {
    sessionStorage.setItem("taskgate.period", select.value); overviewView(ctx).catch(ctx.fail); } },
    Object.keys(PERIODS).map((p) => h("option", { value: p, selected: p === chosen }, PERIOD_WORDS[p])));
  const t = stats.totals;
  const modelColor = palette([...new Set([...ranked(stats.requests), ...ranked(stats.tokens), ...ranked(stats.cost_usd)])]);
  const stopped = table("stopped", ["task", "stop reason", "stopped at", "why it stopped"],
    stats.stopped.map((s) => h("tr", { "data-task": s.id }, h("td", {}, taskLink(s.id)),
      h("td", {}, h("code", {}, s.stop_reason)), h("td", {}, when(s.stopped_at)),
      h("td", { class: "sentence" }, s.stop_message))), "none yet: no task stopped in this period");
  show(ctx.main,
    h("div", { class: "toolbar" }, h("label", {}, "period", select),
      h("span", { id: "totals" }, `${plural(t.requests, "request")} · ${plural(t.tokens, "token")} · `
        + `${usd(t.cost_usd)} · ${plural(t.stops, "stop")}`),
      h("span", { class: "muted", id: "period-span" }, `${when(stats.since)} – ${when(stats.until)}`)),
    h("div", { class: "charts" },
      chart("chart-requests", "Requests by model", stats, stats.requests, int, true, modelColor),
      chart("chart-tokens", "Tokens by model", stats, stats.tokens, int, true, modelColor),
      chart("chart-dollars", "Dollars by model", stats, stats.cost_usd, usd, false, modelColor),
      chart("chart-stops", "Stops by reason", stats, stats.stops, int, true, palette(ranked(stats.stops)))),
    h("div", { class: "charts" },
      h("div", { class: "card" }, h("h2", {}, "Top tasks by dollars"), topTable("top-cost", stats.top_by_cost)),
      h("div", { class: "card" }, h("h2", {}, "Top tasks by requests"), topTable("top-requests", stats.top_by_requests))),
    h("div", { class: "card" }, h("h2", {}, "Stopped in this period"), stopped));
  ctx.timer = setInterval(() => {
    if (location.hash.length <= 2) { clearInterval(ctx.timer); overviewView(ctx).catch(ctx.fail); }
  }, REFRESH_MS);
}
