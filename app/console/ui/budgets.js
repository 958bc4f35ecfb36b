// The budgets (#/budgets): every budget nested under its parent, with its current window's
// spend against its limits as bars (requests, tokens, dollars spent and reserved by
// requests in flight), when the window resets and whether it is exhausted.
import { api, budgetLink, costMeter, extras, h, int, meter, pct, show, table, usd, when } from "./lib.js";

const PAGE = 100;          // rows of the tree shown per page
const FETCH = 1000;        // budgets per API call (the API's maximum)
const MAX_FETCHES = 10;    // at most 10,000 budgets are read to build the tree
const REFRESH_MS = 5000;

/** The fields of a window's spend this page shows; others are listed as they come. */
export const WINDOW_FIELDS = ["window_start", "window_end", "resets_at", "admitted_requests", "leased_requests",
  "input_tokens", "output_tokens", "total_tokens", "cost_usd", "reserved_usd", "exhausted_at", "warnings"];

/** What "leased" means, wherever leased requests are shown. */
export const LEASED_WORDS = "Leased: requests this budget set aside for the gateway processes in advance (escrow "
  + "leases), so that each admits its tasks' requests without locking the budget. They are not used yet; they count "
  + "against the request limit until used, and are given back when the budget runs short or the lease expires "
  + "(TASKGATE_BUDGET_LEASE_S, 60 s by default).";

/** Requests: admitted (dark) and leased to gateway processes, not used yet (light), against the limit. */
export function requestsMeter(c, limit) {
  const used = Number(c.admitted_requests || 0), leased = Number(c.leased_requests || 0);
  const has = limit !== null && limit !== undefined;
  const words = `requests ${int(used)}` + (has ? ` / ${int(limit)}` : "") + (leased ? ` (+${int(leased)} leased)` : "");
  return h("div", { class: "meter", title: leased ? LEASED_WORDS : "requests", "data-meter": "requests" },
    h("div", { class: "bar" + (has && used >= limit ? " full" : "") },
      h("div", { style: `width:${pct(used, limit)}%` }),
      h("div", { class: "reserved", style: `width:${Math.max(0, pct(used + leased, limit) - pct(used, limit))}%` })),
    h("small", {}, words));
}

/** What ran out in the current window: "requests", "tokens", "dollars" (settled at the
 * ceiling). Pure. */
export function exhausted(b) {
  const c = b.current || {};
  const reached = (used, limit) => limit !== null && limit !== undefined && Number(used || 0) >= Number(limit);
  return [reached(c.admitted_requests, b.request_limit) && "requests", reached(c.total_tokens, b.token_limit) && "tokens",
    reached(c.cost_usd, b.cost_limit_usd) && "dollars"].filter(Boolean);
}

/** The budget's state as a badge: paused (the kill switch), exhausted (a limit reached),
 * refused (it refused a request in this window but has room now: a limit was raised, or a
 * request's worst case did not fit), warned (the highest warning threshold it crossed this
 * window: "80 % of requests"), else open. */
export function stateBadge(b) {
  if (b.paused_at) return h("span", { class: "badge stopped", "data-state": "paused",
    title: `paused by ${b.paused_by || "?"} at ${when(b.paused_at)}: ${b.paused_reason || ""}` }, "paused");
  const out = exhausted(b);
  if (out.length) return h("span", { class: "badge stopped", "data-state": "exhausted", title: out.join(", ") + " used up" },
    "exhausted: " + out.join(", "));
  if (b.current && b.current.exhausted_at) return h("span", { class: "badge refused", "data-state": "refused",
    title: "first refused a request at " + when(b.current.exhausted_at) }, "refused");
  const warned = warningWords(b);
  if (warned.length) return h("span", { class: "badge refused", "data-state": "warned", title: warned.join("; ") },
    warned[warned.length - 1].split(" at ")[0]);
  return h("span", { class: "badge active", "data-state": "open" }, "open");
}

const LIMIT_WORDS = { request_limit: "requests", token_limit: "tokens", cost_limit_usd: "dollars" };

/** The warning thresholds the current window crossed, lowest share first: "80 % of
 * requests at 12:01:05". Pure but for the time format. */
export function warningWords(b) {
  const crossed = ((b.current || {}).warnings || []).slice()
    .sort((x, y) => x.threshold - y.threshold || String(x.crossed_at).localeCompare(String(y.crossed_at)));
  return crossed.map((w) => `${w.threshold} % of ${LIMIT_WORDS[w.limit] || w.limit} at ${when(w.crossed_at)}`);
}

/** "month (Europe/Berlin)", or "lifetime". */
export function windowWords(b) { return b.window ? `${b.window} (${b.timezone})` : "lifetime"; }

export function resetsWords(b) {
  const c = b.current || {};
  return c.resets_at ? when(c.resets_at) : "never (lifetime)";
}

/** Bars of one window's spend against the budget's limits. */
export function budgetMeters(b, w) {
  const c = w || b.current || {};
  const more = extras(c, WINDOW_FIELDS).map(([k, v]) => h("small", { class: "muted extra" }, `${k} ${v}`));
  return [requestsMeter(c, b.request_limit),
    meter("tokens", c.total_tokens || 0, b.token_limit),
    costMeter({ cost_usd: c.cost_usd, reserved_usd: c.reserved_usd, cost_limit_usd: b.cost_limit_usd }),
    more.length ? h("div", { class: "extras" }, more) : null];
}

/** The note explaining "leased", when one of `budgets` has leased requests now. */
export function leasedNote(budgets) {
  return budgets.some((b) => b.current && b.current.leased_requests)
    ? h("p", { class: "muted note", id: "leased-note" }, LEASED_WORDS) : null;
}

/** One row of a budgets table; `level` indents it under its parent. */
export function budgetRow(b, level, childCount) {
  const c = b.current || {};
  return h("tr", { "data-budget": b.id },
    h("td", { style: `padding-left:${8 + 18 * (level || 0)}px` }, level ? h("span", { class: "muted" }, "└ ") : null,
      budgetLink(b.id), childCount ? h("small", { class: "muted" }, ` (${childCount} nested)`) : null),
    h("td", {}, h("div", { class: "row meters" }, budgetMeters(b))),
    h("td", {}, c.reserved_usd ? usd(c.reserved_usd) : "none"),
    h("td", {}, windowWords(b)),
    h("td", {}, resetsWords(b)),
    h("td", {}, stateBadge(b)));
}

export const BUDGET_HEADERS = ["budget", "this window / limits", "reserved in flight", "window", "resets at", "state"];

/** The budgets in tree order: [budget, level] pairs, each parent before its children (ids
 * in order at every level). A budget whose parent is not among them is shown as a root. Pure. */
export function tree(budgets) {
  const byId = new Map(budgets.map((b) => [b.id, b]));
  const kids = new Map();
  const roots = [];
  for (const b of budgets) {
    if (b.parent && byId.has(b.parent)) {
      if (!kids.has(b.parent)) kids.set(b.parent, []);
      kids.get(b.parent).push(b);
    } else roots.push(b);
  }
  const byName = (a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
  const out = [];
  const walk = (b, level, seen) => {
    if (seen.has(b.id)) return;  // never loops, whatever the data
    seen.add(b.id);
    out.push([b, level, (kids.get(b.id) || []).length]);
    for (const k of (kids.get(b.id) || []).sort(byName)) walk(k, level + 1, seen);
  };
  const seen = new Set();
  for (const r of roots.sort(byName)) walk(r, 0, seen);
  return out;
}

async function allBudgets() {
  const out = [];
  let after = "";
  for (let i = 0; i < MAX_FETCHES; i++) {
    const page = await api("GET", `/admin/budgets?limit=${FETCH}` + (after ? "&after=" + encodeURIComponent(after) : ""));
    out.push(...page.data);
    if (!page.has_more) return { budgets: out, truncated: false };
    after = page.next_after;
  }
  return { budgets: out, truncated: true };
}

export async function budgetsView(ctx) {
  const { budgets, truncated } = await allBudgets();
  if (!location.hash.startsWith("#/budgets")) return;  // the operator moved on meanwhile
  const rerender = () => budgetsView(ctx).catch(ctx.fail);
  const rows = tree(budgets);
  const pages = Math.max(1, Math.ceil(rows.length / PAGE));
  const at = Math.min(pages - 1, Math.max(0, Number(sessionStorage.getItem("taskgate.budgetPage")) || 0));
  const go = (n) => { sessionStorage.setItem("taskgate.budgetPage", String(n)); rerender(); };
  const shown = rows.slice(at * PAGE, (at + 1) * PAGE);
  const span = rows.length ? `budgets ${at * PAGE + 1}–${at * PAGE + shown.length} of ${rows.length}` : "no budgets";
  show(ctx.main,
    h("div", { class: "toolbar" }, h("span", { class: "muted", id: "page-span" }, span),
      h("button", { id: "prev-page", disabled: at === 0, onclick: () => go(at - 1) }, "← previous"),
      h("button", { id: "next-page", disabled: at >= pages - 1, onclick: () => go(at + 1) }, "next →")),
    truncated ? h("p", { class: "muted", id: "truncated" }, `Showing the first ${budgets.length} budgets by id.`) : null,
    table("budgets", BUDGET_HEADERS, shown.map(([b, level, n]) => budgetRow(b, level, n)),
      "none yet: create one with taskgate budgets create --id team-a --window month --cost-limit 500"),
    leasedNote(shown.map(([b]) => b)));
  ctx.timer = setInterval(() => {
    if (location.hash.startsWith("#/budgets")) { clearInterval(ctx.timer); rerender(); }
  }, REFRESH_MS);
}
