// taskgate dashboard: vanilla JS over the admin API (/admin). No network but the gateway.
// Every value from the API goes into the page as text (textContent), never as HTML.
"use strict";

const TOKEN_KEY = "taskgate.adminToken";
const REFRESH_MS = 3000;
const main = document.getElementById("main");
let timer = null;

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined && v !== false) el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) el.append(c instanceof Node ? c : String(c));
  return el;
}

class AuthError extends Error {}

async function api(method, path, body) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const r = await fetch(path, {
    method, headers: Object.assign({ authorization: "Bearer " + token },
                                   body === undefined ? {} : { "content-type": "application/json" }),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (r.status === 401) throw new AuthError("The admin token was not accepted.");
  const data = r.status === 204 ? null : await r.json();
  if (!r.ok) {
    const d = data && data.detail;
    throw new Error(`HTTP ${r.status}: ` + (Array.isArray(d) ? d.map((e) => e.msg).join("; ") : d));
  }
  return data;
}

function loginView(message) {
  clearInterval(timer);
  const input = h("input", { type: "password", id: "token", size: 40, placeholder: "TASKGATE_ADMIN_TOKEN" });
  const form = h("form", { class: "card", id: "login", onsubmit: (e) => {
    e.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    route();
  } }, h("h2", {}, "Admin token"),
    h("p", { class: "muted" }, "Kept in this browser tab's session only."),
    message ? h("p", { class: "error" }, message) : null,
    h("div", { class: "row" }, input, h("button", { type: "submit", class: "primary" }, "Open")));
  main.replaceChildren(form);
  input.focus();
}

function pct(used, limit) { return limit ? Math.min(100, Math.round((100 * used) / limit)) : 0; }

function meter(label, used, limit, unit) {
  const full = limit !== null && limit !== undefined && used >= limit;
  const text = limit === null || limit === undefined ? `${used}${unit || ""}` : `${used} / ${limit}${unit || ""}`;
  return h("div", { class: "meter", title: label },
    h("div", { class: "bar" + (full ? " full" : "") }, h("div", { style: `width:${pct(used, limit)}%` })),
    h("small", {}, `${label} ${text}`));
}

function elapsedS(t) {
  if (!t.first_admitted_at) return 0;
  const end = t.stopped_at ? new Date(t.stopped_at) : new Date();
  return Math.max(0, Math.round((end - new Date(t.first_admitted_at)) / 1000));
}

function meters(t) {
  return [meter("requests", t.admitted_requests, t.request_limit),
          meter("tokens", t.total_tokens, t.token_limit),
          meter("tool calls", t.tool_calls, t.tool_call_limit),
          meter("time", elapsedS(t), t.max_duration_s, " s")];
}

function badge(status) { return h("span", { class: "badge " + status }, status); }

async function listView() {
  const filter = sessionStorage.getItem("taskgate.filter") || "";
  const select = h("select", { id: "status-filter", onchange: () => {
    sessionStorage.setItem("taskgate.filter", select.value); listView(); } },
    ["", "active", "stopped"].map((s) => h("option", { value: s, selected: s === filter }, s || "all")));
  const auto = h("input", { type: "checkbox", id: "auto-refresh", checked: sessionStorage.getItem("taskgate.auto") !== "off",
    onchange: () => { sessionStorage.setItem("taskgate.auto", auto.checked ? "on" : "off"); } });
  const data = await api("GET", "/admin/tasks?limit=500" + (filter ? "&status=" + filter : ""));
  const rows = data.data.map((t) => h("tr", { "data-task": t.id },
    h("td", {}, h("a", { href: "#/task/" + encodeURIComponent(t.id) }, t.id)),
    h("td", {}, badge(t.status)),
    h("td", {}, h("div", { class: "row meters" }, meters(t))),
    h("td", {}, t.stop_reason ? h("code", {}, t.stop_reason) : ""),
    h("td", { class: "sentence" }, t.stop_message || "")));
  main.replaceChildren(
    h("div", { class: "toolbar" }, h("label", {}, "status", select),
      h("label", {}, "auto-refresh", auto), h("span", { class: "muted" }, `${data.data.length} tasks`)),
    h("table", { id: "tasks" }, h("tr", {}, ["task", "status", "counters / limits", "stop reason", "why it stopped"]
      .map((c) => h("th", {}, c))), rows));
  clearInterval(timer);
  timer = setInterval(() => { if (auto.checked && location.hash.length <= 2) listView().catch(fail); }, REFRESH_MS);
}

function detailWords(detail) {
  if (!detail) return null;
  return h("ul", { class: "detail" }, Object.entries(detail).map(([k, v]) =>
    h("li", {}, h("span", { class: "muted" }, k.replace(/_/g, " ") + ": "),
      typeof v === "object" ? JSON.stringify(v) : String(v))));
}

function limitsForm(t) {
  const fields = [["request_limit", "requests"], ["token_limit", "tokens"], ["max_duration_s", "max duration (s)"],
                  ["tool_call_limit", "tool calls"], ["max_stalls", "stalls"]];
  const inputs = {};
  const msg = h("span", { class: "muted", id: "limits-msg" });
  const form = h("form", { class: "row", id: "limits", onsubmit: async (e) => {
    e.preventDefault();
    const body = {};
    for (const [name] of fields) {
      const raw = inputs[name].value.trim();
      const now = raw === "" ? null : Number(raw);
      if (now !== t[name]) body[name] = now;
    }
    try { await api("PATCH", "/admin/tasks/" + encodeURIComponent(t.id), body); msg.textContent = "saved"; taskView(t.id); }
    catch (err) { if (err instanceof AuthError) return loginView(err.message); msg.textContent = err.message; msg.className = "error"; }
  } }, fields.map(([name, label]) => {
    inputs[name] = h("input", { name, type: "number", min: 0, step: "any", size: 8,
                               value: t[name] === null ? "" : t[name], placeholder: "none" });
    return h("label", {}, label, inputs[name]);
  }), h("button", { type: "submit" }, "Save limits"), msg);
  return form;
}

function actions(t) {
  const msg = h("span", { class: "error", id: "action-msg" });
  const run = async (fn) => { try { await fn(); taskView(t.id); } catch (err) {
    if (err instanceof AuthError) return loginView(err.message); msg.textContent = err.message; } };
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

async function taskView(id) {
  clearInterval(timer);
  const path = "/admin/tasks/" + encodeURIComponent(id);
  const [t, events, ledger] = await Promise.all([api("GET", path), api("GET", path + "/events"),
                                                 api("GET", path + "/tool-calls")]);
  const stop = t.status === "stopped" ? h("div", { class: "card stopbox", id: "stop-card" },
    h("h2", {}, `Stopped: ${t.stop_reason}`), h("p", { class: "sentence", id: "stop-message-text" }, t.stop_message),
    detailWords(t.stop_detail)) : null;
  const timeline = h("ol", { class: "timeline", id: "events" }, events.data.map((e) => h("li", {},
    h("time", {}, new Date(e.created_at).toLocaleString()), h("span", { class: "kind" }, e.kind),
    e.message, e.detail && e.detail.request_id ? h("span", { class: "muted" }, `  (${e.detail.request_id})`) : null)));
  const conv = h("table", { id: "conversations" }, h("tr", {}, ["conversation", "tool calls", "verdict", "reason", "count"]
    .map((c) => h("th", {}, c))), ledger.conversations.map((c) => h("tr", {},
    h("td", {}, h("code", {}, c.conversation_key.slice(0, 16))), h("td", {}, c.tool_calls),
    h("td", {}, c.verdict), h("td", {}, c.reason || ""), h("td", {}, c.count))));
  const calls = h("table", { id: "tool-calls" }, h("tr", {}, ["#", "tool", "arguments", "result", "error", "at"]
    .map((c) => h("th", {}, c))), ledger.data.map((r) => h("tr", {}, h("td", {}, r.seq), h("td", {}, r.tool_name),
    h("td", {}, h("code", {}, r.arguments_hash.slice(0, 12))), h("td", {}, h("code", {}, (r.result_hash || "pending").slice(0, 12))),
    h("td", {}, r.is_error === null ? "" : r.is_error ? "yes" : "no"), h("td", {}, new Date(r.created_at).toLocaleTimeString()))));
  main.replaceChildren(
    h("p", {}, h("a", { href: "#/" }, "← all tasks")),
    h("div", { class: "card" }, h("h2", { id: "task-title" }, t.id, " ", badge(t.status)),
      h("div", { class: "row" }, meters(t)), h("p", {}, actions(t))),
    stop,
    h("div", { class: "card" }, h("h2", {}, "Limits"), limitsForm(t)),
    h("div", { class: "card" }, h("h2", {}, "Events"), timeline),
    h("div", { class: "card" }, h("h2", {}, "Loop guard: conversations"), conv),
    h("div", { class: "card" }, h("h2", {}, "Tool-call ledger (hashes only)"), calls));
}

function fail(err) {
  if (err instanceof AuthError) return loginView(err.message);
  main.replaceChildren(h("p", { class: "error" }, err.message || String(err)));
}

function route() {
  const logout = document.getElementById("logout");
  if (!sessionStorage.getItem(TOKEN_KEY)) { logout.hidden = true; return loginView(); }
  logout.hidden = false;
  const m = location.hash.match(/^#\/task\/(.+)$/);
  (m ? taskView(decodeURIComponent(m[1])) : listView()).catch(fail);
}

document.getElementById("logout").addEventListener("click", () => { sessionStorage.removeItem(TOKEN_KEY); route(); });
window.addEventListener("hashchange", route);
route();
