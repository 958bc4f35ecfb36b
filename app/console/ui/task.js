// One task (#/task/ID): counters and dollars, stop/resume, limits, requests, events,
// the loop guard's verdicts and its ledger with the streak that caused a stop marked.
import { AuthError, api, badge, budgetLink, h, int, meters, show, table, usd, when } from "./lib.js";

const LIMITS = [["request_limit", "requests"], ["token_limit", "tokens"], ["cost_limit_usd", "dollars (USD)"],
                ["max_duration_s", "max duration (s)"], ["tool_call_limit", "tool calls"], ["max_stalls", "stalls"]];

/** A detail value in words: null is "none", lists are comma-separated, objects "key value". */
export function words(v) {
  if (v === null || v === undefined) return "none";
  if (Array.isArray(v)) return v.length ? v.map(words).join(", ") : "none";
  if (typeof v === "object") {
    const parts = Object.entries(v).map(([k, x]) => `${k.replace(/_/g, " ")} ${words(x)}`);
    return parts.length ? parts.join(", ") : "none";
  }
  return String(v);
}

function detailWords(detail) {
  if (!detail) return null;
  return h("ul", { class: "detail" }, Object.entries(detail).map(([k, v]) =>
    h("li", {}, h("span", { class: "muted" }, k.replace(/_/g, " ") + ": "), words(v))));
}

const WARNED_LIMITS = { request_limit: "requests", token_limit: "tokens", cost_limit_usd: "dollars" };

/** The warning thresholds the task crossed at its limits' current values, lowest share
 * first: "80 % of requests". Pure: a task as GET /admin/tasks/{id} returns it. */
export function taskWarnings(t) {
  return (t.warnings || []).slice().sort((x, y) => x.threshold - y.threshold)
    .map((w) => `${w.threshold} % of ${WARNED_LIMITS[w.limit] || w.limit}`);
}

/** A badge with the highest threshold crossed (all of them and those in force in its
 * title), or null when none was. */
function warningBadge(t) {
  const warned = taskWarnings(t);
  if (!warned.length) return null;
  const inForce = (t.thresholds || []).map((x) => `${x} %`).join(", ") || "none";
  return h("span", { class: "badge refused", id: "task-warning", "data-state": "warned",
    title: `crossed: ${warned.join("; ")} (thresholds ${inForce})` }, warned[warned.length - 1]);
}

function limitsForm(ctx, t) {
  const inputs = {};
  const msg = h("span", { class: "muted", id: "limits-msg" });
  return h("form", { class: "row", id: "limits", onsubmit: async (e) => {
    e.preventDefault();
    const body = {};
    for (const [name] of LIMITS) {
      const raw = inputs[name].value.trim();
      const now = raw === "" ? null : Number(raw);
      const was = t[name] === null || t[name] === undefined ? null : Number(t[name]);
      if (now !== was) body[name] = now;
    }
    try { await api("PATCH", "/admin/tasks/" + encodeURIComponent(t.id), body); msg.textContent = "saved"; taskView(ctx, t.id).catch(ctx.fail); }
    catch (err) { if (err instanceof AuthError) return ctx.fail(err); msg.textContent = err.message; msg.className = "error"; }
  } }, LIMITS.map(([name, label]) => {
    const v = t[name];
    inputs[name] = h("input", { name, type: "number", min: 0, step: "any", size: 8,
                               value: v === null || v === undefined ? "" : v, placeholder: "none" });
    return h("label", {}, label, inputs[name]);
  }), h("button", { type: "submit" }, "Save limits"), msg);
}

function actions(ctx, t) {
  const msg = h("span", { class: "error", id: "action-msg" });
  const run = async (fn) => { try { await fn(); await taskView(ctx, t.id); } catch (err) {
    if (err instanceof AuthError) return ctx.fail(err); msg.textContent = err.message; } };
  const path = "/admin/tasks/" + encodeURIComponent(t.id);
  if (t.status === "active") {
    const note = h("input", { id: "stop-message", size: 30, placeholder: "note (optional)" });
    return h("div", { class: "row" }, note, h("button", { class: "danger", id: "stop", onclick: () =>
      run(() => api("POST", path + "/stop", { reason: "manual", message: note.value.trim() || null })) }, "Stop task"), msg);
  }
  const reason = h("input", { id: "resume-reason", size: 40, placeholder: "why it may go on (required)" });
  return h("div", { class: "row" }, reason, h("button", { class: "primary", id: "resume", onclick: () => {
    if (!reason.value.trim()) { msg.textContent = "Resuming needs a reason."; reason.focus(); return; }
    run(() => api("POST", path + "/resume", { reason: reason.value.trim() }));
  } }, "Resume task"), msg);
}

/** Ledger rows with, per conversation, the length of the identical run each call is in
 * (same tool, arguments and result, one after another) and whether it is the run named by
 * the stop. Pure: rows in seq order, stop detail or null. */
export function streaks(rows, stop) {
  const last = new Map();  // conversation -> {sig, n}
  return rows.map((r) => {
    const sig = `${r.tool_name}\u0000${r.arguments_hash}\u0000${r.result_hash}`;
    const prev = last.get(r.conversation_key);
    const n = r.result_hash && prev && prev.sig === sig ? prev.n + 1 : 1;
    last.set(r.conversation_key, { sig, n });
    const culprit = !!stop && stop.conversation_key === r.conversation_key && stop.tool_name === r.tool_name
      && (!stop.arguments_hash || stop.arguments_hash === r.arguments_hash)
      && (!stop.result_hash || stop.result_hash === r.result_hash);
    return { ...r, streak: n, culprit };
  });
}

function ledgerTable(ledger, t) {
  const rows = streaks(ledger.data, t.status === "stopped" ? t.stop_detail : null);
  return table("tool-calls", ["#", "conversation", "tool", "arguments", "result", "error", "streak", "at"],
    rows.map((r, i) => h("tr", { class: r.culprit ? "culprit" : null, title: r.culprit ? "part of the streak that stopped the task" : null },
      h("td", {}, i + 1), h("td", {}, h("code", {}, r.conversation_key.slice(0, 12))), h("td", {}, r.tool_name),
      h("td", {}, r.arguments_preview ? h("code", { class: "preview" }, r.arguments_preview) : null,
        h("code", { class: "hash", title: r.arguments_hash }, r.arguments_hash.slice(0, 12))),
      h("td", {}, h("code", { class: "hash", title: r.result_hash || "" }, (r.result_hash || "pending").slice(0, 12))),
      h("td", {}, r.is_error === null ? "" : r.is_error ? "yes" : "no"),
      h("td", {}, r.streak > 1 ? `×${r.streak}` : ""),
      h("td", {}, new Date(r.created_at).toLocaleTimeString()))),
    "none yet: no tool calls seen for this task");
}

function requestsTable(requests) {
  if (!requests) return null;
  return h("div", { class: "card" }, h("h2", {}, "Requests"),
    table("requests", ["at", "endpoint", "model", "status", "outcome", "tokens in / out", "dollars", "ms", "request id"],
      requests.data.map((r) => h("tr", {}, h("td", {}, when(r.finished_at)), h("td", {}, h("code", {}, r.endpoint)),
        h("td", {}, r.model), h("td", {}, r.status), h("td", {}, r.outcome),
        h("td", {}, `${int(r.input_tokens)} / ${int(r.output_tokens)}`), h("td", {}, usd(r.cost_usd)),
        h("td", {}, Math.round(r.duration_ms)), h("td", {}, h("code", {}, r.request_id)))),
      "none yet: no request of this task has finished"));
}

export async function taskView(ctx, id) {
  const path = "/admin/tasks/" + encodeURIComponent(id);
  const [t, events, ledger, requests] = await Promise.all([api("GET", path), api("GET", path + "/events"),
    api("GET", path + "/tool-calls"), api("GET", path + "/requests?limit=200")]);
  if (decodeURIComponent(location.hash) !== "#/task/" + id) return;  // the operator moved on meanwhile
  const stop = t.status === "stopped" ? h("div", { class: "card stopbox", id: "stop-card" },
    h("h2", {}, `Stopped: ${t.stop_reason}`), h("p", { class: "sentence", id: "stop-message-text" }, t.stop_message),
    detailWords(t.stop_detail)) : null;
  const timeline = events.data.length ? h("ol", { class: "timeline", id: "events" }, events.data.map((e) => h("li", {},
    h("time", {}, when(e.created_at)), h("span", { class: "kind" }, e.kind), e.message,
    e.detail && e.detail.request_id ? h("span", { class: "muted" }, `  (${e.detail.request_id})`) : null)))
    : h("p", { class: "muted", id: "events" }, "none yet");
  const conv = table("conversations", ["conversation", "tool calls", "verdict", "reason", "count"],
    ledger.conversations.map((c) => h("tr", {},
      h("td", {}, h("code", {}, c.conversation_key.slice(0, 16))), h("td", {}, c.tool_calls),
      h("td", {}, c.verdict), h("td", {}, c.reason), h("td", {}, c.count))),
    "none yet: the loop guard has seen no tool call of this task");
  show(ctx.main,
    h("p", {}, h("a", { href: "#/tasks" }, "← all tasks")),
    h("div", { class: "card" }, h("h2", { id: "task-title" }, t.id, " ", badge(t.status), " ", warningBadge(t)),
      t.budget ? h("p", { id: "task-budget" }, "draws from budget ", budgetLink(t.budget)) : null,
      t.strikes ? h("p", { id: "task-strikes", class: "muted" }, `${t.strikes} strike${t.strikes === 1 ? "" : "s"}: ` +
        "answers the loop guard cut or withheld, the model told in-band; a second in one conversation stops the task " +
        "(see Events)") : null,
      h("div", { class: "row" }, meters(t)), h("p", {}, actions(ctx, t))),
    stop,
    h("div", { class: "card" }, h("h2", {}, "Limits"), limitsForm(ctx, t)),
    requestsTable(requests),
    h("div", { class: "card" }, h("h2", {}, "Events"), timeline),
    h("div", { class: "card" }, h("h2", {}, "Loop guard: conversations"), conv),
    h("div", { class: "card" }, h("h2", {}, "Tool-call ledger"), ledgerTable(ledger, t)));
}
