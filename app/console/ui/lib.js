// Shared pieces of the dashboard: element builder, admin API client, number formats,
// meters and tables. Every value from the API goes into the page as text, never as HTML.

export const TOKEN_KEY = "taskgate.adminToken";

/** h("td", {class: "x"}, child, ...): an element; null, undefined and false children are skipped. */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined && v !== false) el.setAttribute(k, v === true ? "" : v);
  }
  return fill(el, children);
}

/** Append children to el, skipping null/undefined/false (never the text "null"). */
export function fill(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c !== null && c !== undefined && c !== false) el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

/** Replace el's children, skipping null/undefined/false ones. */
export function show(el, ...children) {
  el.replaceChildren();
  return fill(el, children);
}

export class AuthError extends Error {}

/** The sentence of an admin API error body: {"error": {"message", "param", ...}}. */
export function errorText(status, data) {
  const e = data && data.error;
  const message = e && typeof e === "object" ? e.message : null;
  return `HTTP ${status}: ` + (message || (typeof e === "string" ? e : "the gateway gave no reason"));
}

/** Call the admin API; resolves to the JSON body, throws AuthError on 401, Error otherwise. */
export async function api(method, path, body) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const r = await fetch(path, {
    method, headers: Object.assign({ authorization: "Bearer " + token },
                                   body === undefined ? {} : { "content-type": "application/json" }),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (r.status === 401) throw new AuthError("The admin token was not accepted.");
  let data = null;
  if (r.status !== 204) { try { data = await r.json(); } catch { data = null; } }
  if (!r.ok) throw new Error(errorText(r.status, data));
  return data;
}

const INT = new Intl.NumberFormat("en-US");
export function int(n) { return n === null || n === undefined ? "" : INT.format(n); }

/** US dollars: $12.34, or enough digits to show small amounts ($0.0000234). */
export function usd(x) {
  if (x === null || x === undefined) return "";
  const v = Number(x);
  if (v === 0) return "$0.00";
  if (Math.abs(v) >= 0.01) return "$" + v.toFixed(2);
  return "$" + v.toPrecision(3).replace(/0+$/, "");
}

export function pct(used, limit) { return limit ? Math.min(100, Math.round((100 * used) / limit)) : 0; }

/** A labelled bar: used against limit (no limit: the number alone). */
export function meter(label, used, limit, unit, fmt) {
  const f = fmt || ((v) => `${int(v)}${unit || ""}`);
  const has = limit !== null && limit !== undefined;
  const full = has && used >= limit;
  return h("div", { class: "meter", title: label },
    h("div", { class: "bar" + (full ? " full" : "") }, h("div", { style: `width:${pct(used, limit)}%` })),
    h("small", {}, `${label} ${has ? `${f(used)} / ${f(limit)}` : f(used)}`));
}

/** Dollars: spent (dark) and reserved by requests in flight (light) against the ceiling. */
export function costMeter(t) {
  const spent = Number(t.cost_usd || 0), reserved = Number(t.reserved_usd || 0);
  const limit = t.cost_limit_usd === null || t.cost_limit_usd === undefined ? null : Number(t.cost_limit_usd);
  const full = limit !== null && spent + reserved >= limit;
  const words = `dollars ${usd(spent)} spent` + (reserved ? `, ${usd(reserved)} reserved` : "")
    + (limit !== null ? ` / ${usd(limit)}` : "");
  return h("div", { class: "meter cost", title: "dollars", "data-meter": "cost" },
    h("div", { class: "bar" + (full ? " full" : "") },
      h("div", { style: `width:${pct(spent, limit)}%` }),
      h("div", { class: "reserved", style: `width:${Math.max(0, pct(spent + reserved, limit) - pct(spent, limit))}%` })),
    h("small", {}, words));
}

/** Seconds from the task's first admitted request to its stop (stopped) or to now (active),
 * what max_duration_s counts; 0 before its first request. */
export function elapsedS(t, now) {
  if (!t.first_admitted_at) return 0;
  const end = t.status === "stopped" && t.stopped_at ? new Date(t.stopped_at) : (now || new Date());
  return Math.max(0, (end - new Date(t.first_admitted_at)) / 1000);
}

/** A duration in words: "0.09 s", "4.2 s", "42 s", "3 min 20 s", "2 h 5 min", "3 d 4 h". Pure. */
export function duration(s) {
  if (s === null || s === undefined) return "";
  if (s === 0) return "0 s";
  if (s < 10) return `${Number(s.toPrecision(s < 1 ? 1 : 2))} s`;
  if (s < 60) return `${Math.round(s)} s`;
  const parts = (big, bigUnit, small, smallUnit) => `${big} ${bigUnit}` + (small ? ` ${small} ${smallUnit}` : "");
  if (s < 3600) { const m = Math.floor(s / 60); return parts(m, "min", Math.round(s - 60 * m), "s"); }
  if (s < 86400) { const hr = Math.floor(s / 3600); return parts(hr, "h", Math.round((s - 3600 * hr) / 60), "min"); }
  const d = Math.floor(s / 86400);
  return parts(d, "d", Math.round((s - 86400 * d) / 3600), "h");
}

/** The time bar: how long the task ran until its stop ("ran"), or has been running since its
 * first request ("time"), against max_duration_s. */
export function timeMeter(t, now) {
  const stopped = t.status === "stopped";
  const m = meter(stopped ? "ran" : "time", elapsedS(t, now), t.max_duration_s, "", duration);
  m.setAttribute("data-meter", "time");
  m.title = !t.first_admitted_at ? "no request admitted yet"
    : stopped ? "from its first admitted request to its stop" : "since its first admitted request (max_duration_s counts this)";
  return m;
}

export function meters(t) {
  return [meter("requests", t.admitted_requests, t.request_limit),
          meter("tokens", t.total_tokens, t.token_limit),
          meter("tool calls", t.tool_calls, t.tool_call_limit),
          timeMeter(t),
          costMeter(t)];
}

export function badge(status) { return h("span", { class: "badge " + status }, status); }

/** A table with a header row; with no rows, one row saying `empty` ("none yet"). */
export function table(id, headers, rows, empty) {
  const body = rows.length ? rows
    : [h("tr", { class: "empty" }, h("td", { colspan: headers.length, class: "muted" }, empty || "none yet"))];
  return h("table", { id }, h("thead", {}, h("tr", {}, headers.map((c) => h("th", {}, c)))), h("tbody", {}, body));
}

export function taskLink(id) { return h("a", { href: "#/task/" + encodeURIComponent(id) }, id); }

export function when(iso) { return iso ? new Date(iso).toLocaleString() : ""; }

export function budgetLink(id) { return h("a", { href: "#/budget/" + encodeURIComponent(id) }, id); }

/** Page cursors kept in session storage under `key`: "" for the first page, then the id
 * each page starts after (the API's `next_after`). */
export function cursors(key) { return JSON.parse(sessionStorage.getItem(key) || "[\"\"]"); }

/** "← previous" and "next →" over the cursors of `key`; `go()` renders the page again. */
export function pageButtons(key, pages, page, go, idPrefix) {
  const set = (c) => { sessionStorage.setItem(key, JSON.stringify(c)); go(); };
  return [h("button", { id: idPrefix + "prev-page", disabled: pages.length <= 1, onclick: () => set(pages.slice(0, -1)) },
    "← previous"),
  h("button", { id: idPrefix + "next-page", disabled: !page.has_more, onclick: () => set([...pages, page.next_after]) },
    "next →")];
}

/** Fields of `obj` this page does not know (e.g. added by a newer gateway), as
 * [label, text] pairs: numbers, strings and booleans only; null, lists and objects skipped. */
export function extras(obj, known) {
  const out = [];
  for (const [k, v] of Object.entries(obj || {})) {
    if (known.includes(k) || v === null || v === undefined || typeof v === "object") continue;
    if (typeof v === "number" && !Number.isFinite(v)) continue;
    const label = k.replace(/_usd$/, "").replace(/_at$/, "").replace(/_/g, " ");
    let text = String(v);
    if (typeof v === "number") text = k.endsWith("_usd") ? usd(v) : Number.isInteger(v) ? int(v) : String(v);
    else if (typeof v === "boolean") text = v ? "yes" : "no";
    else if (k.endsWith("_at") && !Number.isNaN(Date.parse(v))) text = when(v);
    out.push([label, text]);
  }
  return out;
}
