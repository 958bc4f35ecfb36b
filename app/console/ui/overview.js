// The overview (#/): the fleet over a period. Requests, tokens and dollars over time stacked
// by model, stops by reason, the top tasks, and the tasks stopped in the period, from one
// aggregated call (GET /admin/stats). Charts: uPlot (vendor/uplot, served by the gateway).
import { api, h, int, show, table, taskLink, usd, when } from "./lib.js";

const PERIODS = { "1h": [3600, 60], "24h": [86400, 1800], "7d": [7 * 86400, 3 * 3600] };
const COLORS = ["#4a7bd0", "#e8a33d", "#3fa66b", "#c2417b", "#7a5bd0", "#2a9fb0", "#9aa3ad", "#cf222e"];
const REFRESH_MS = 10000;

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

function chart(id, title, stats, series, fmt) {
  const names = Object.keys(series).sort((a, b) => sum(series[b]) - sum(series[a]));
  const box = h("div", { class: "card chart", id }, h("h3", {}, title));
  const total = names.reduce((t, n) => t + sum(series[n]), 0);
  if (!names.length || total === 0) { box.append(h("p", { class: "muted" }, "none yet in this period")); return box; }
  if (typeof uPlot === "undefined") { box.append(h("p", { class: "error" }, "the chart library did not load")); return box; }
  const xs = stats.buckets.map((b) => Date.parse(b) / 1000);
  const stacked = stack(names, series);
  // the biggest band (the total) first: later series are painted over it
  const order = names.map((_, i) => names.length - 1 - i);
  const opts = {
    width: 520, height: 200, legend: { show: true }, cursor: { drag: { x: false, y: false } },
    scales: { x: { time: true } },
    axes: [{}, { values: (u, ticks) => ticks.map((v) => fmt(v)), size: 70 }],
    series: [{}, ...order.map((i) => ({ label: names[i], stroke: COLORS[i % COLORS.length],
      fill: COLORS[i % COLORS.length] + "55", width: 1, value: (u, v) => (v === null ? "" : fmt(v)) }))],
  };
  const holder = h("div", {});
  box.append(holder,
    h("p", { class: "muted legend-note" }, `total ${fmt(total)}; bands stacked (the legend shows running totals)`));
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

export async function overviewView(ctx) {
  const chosen = sessionStorage.getItem("taskgate.period") || "1h";
  const [span, step] = PERIODS[chosen] || PERIODS["1h"];
  const until = new Date();
  const since = new Date(until.getTime() - span * 1000);
  const stats = await api("GET", `/admin/stats?since=${encodeURIComponent(since.toISOString())}`
    + `&until=${encodeURIComponent(until.toISOString())}&step=${step}`);
  if (location.hash.length > 2 && location.hash !== "#/") return;  // the operator moved on meanwhile
  const select = h("select", { id: "period", onchange: () => {
    sessionStorage.setItem("taskgate.period", select.value); overviewView(ctx).catch(ctx.fail); } },
    Object.keys(PERIODS).map((p) => h("option", { value: p, selected: p === chosen }, "last " + p)));
  const t = stats.totals;
  const stopped = table("stopped", ["task", "stop reason", "stopped at", "why it stopped"],
    stats.stopped.map((s) => h("tr", { "data-task": s.id }, h("td", {}, taskLink(s.id)),
      h("td", {}, h("code", {}, s.stop_reason)), h("td", {}, when(s.stopped_at)),
      h("td", { class: "sentence" }, s.stop_message))), "none yet: no task stopped in this period");
  show(ctx.main,
    h("div", { class: "toolbar" }, h("label", {}, "period", select),
      h("span", { id: "totals" }, `${int(t.requests)} requests · ${int(t.tokens)} tokens · ${usd(t.cost_usd)} · `
        + `${int(t.stops)} stops`)),
    h("div", { class: "charts" },
      chart("chart-requests", "Requests by model", stats, stats.requests, int),
      chart("chart-tokens", "Tokens by model", stats, stats.tokens, int),
      chart("chart-dollars", "Dollars by model", stats, stats.cost_usd, usd),
      chart("chart-stops", "Stops by reason", stats, stats.stops, int)),
    h("div", { class: "charts" },
      h("div", { class: "card" }, h("h2", {}, "Top tasks by dollars"), topTable("top-cost", stats.top_by_cost)),
      h("div", { class: "card" }, h("h2", {}, "Top tasks by requests"), topTable("top-requests", stats.top_by_requests))),
    h("div", { class: "card" }, h("h2", {}, "Stopped in this period"), stopped));
  ctx.timer = setInterval(() => {
    if (location.hash.length <= 2) { clearInterval(ctx.timer); overviewView(ctx).catch(ctx.fail); }
  }, REFRESH_MS);
}
