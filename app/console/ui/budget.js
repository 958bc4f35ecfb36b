// One budget (#/budget/ID): its current window's spend against its limits, the kill switch
// (pause every task under it, resume; each after a confirmation), the windows before, its
// budget keys (create one, shown once; revoke one, after a confirmation: the
// admin API's /admin/budgets/{id}/keys), the tasks drawing from it (linking to their pages)
// and the budgets nested in it, each list in pages.
import { AuthError, api, badge, budgetLink, cursors, duration, extras, h, int, meters, pageButtons, show, table,
  taskLink, usd, when } from "./lib.js";
import { BUDGET_HEADERS, LEASED_WORDS, WINDOW_FIELDS, budgetMeters, budgetRow, resetsWords, stateBadge,
  warningWords, windowWords } from "./budgets.js";
import { words } from "./task.js";

const TASKS_PAGE = 50;
const CHILDREN_PAGE = 50;
const REFRESH_MS = 5000;
const FIELDS = ["id", "parent", "depth", "request_limit", "token_limit", "cost_limit_usd", "window", "timezone",
  "metadata", "tasks", "children", "current", "windows", "created_at", "updated_at", "paused_at", "paused_by",
  "paused_reason", "thresholds", "model_limits", "requests_per_minute", "tokens_per_minute", "minute"];

/** A budget's rates and this minute's count in words, or null for none. Pure. */
export function rateWords(b) {
  const rates = [b.requests_per_minute ? `${int(b.requests_per_minute)} requests` : null,
    b.tokens_per_minute ? `${int(b.tokens_per_minute)} tokens` : null].filter(Boolean);
  if (!rates.length) return null;
  const m = b.minute || {};
  return `${rates.join(" · ")} per minute (this minute: ${int(m.requests || 0)} requests, ${int(m.tokens || 0)} `
    + "tokens); over a rate a request gets 429 rate_limited with Retry-After";
}

/** Each model glob's limits and its spend this window, in words. Pure. */
export function modelLimitWords(b) {
  const spent = Object.fromEntries(((b.current && b.current.models) || []).map((m) => [m.model, m]));
  return (b.model_limits || []).map((e) => {
    const m = spent[e.model] || {};
    const parts = [e.token_limit !== null && e.token_limit !== undefined
      ? `${int(m.total_tokens || 0)} / ${int(e.token_limit)} tokens` : null,
    e.cost_limit_usd !== null && e.cost_limit_usd !== undefined
      ? `${usd(m.cost_usd || 0)} / ${usd(e.cost_limit_usd)}` : null].filter(Boolean);
    return `${e.model}: ${parts.join(" · ")}`;
  });
}

function limitWords(b) {
  const parts = [b.request_limit !== null && b.request_limit !== undefined ? `${int(b.request_limit)} requests` : null,
    b.token_limit !== null && b.token_limit !== undefined ? `${int(b.token_limit)} tokens` : null,
    b.cost_limit_usd !== null && b.cost_limit_usd !== undefined ? usd(b.cost_limit_usd) : null].filter(Boolean);
  return parts.length ? parts.join(" · ") + (b.window ? ` per ${b.window}` : " in its lifetime")
    : "none: it groups and counts";
}

/** The leased requests of a window in words, with what leasing is. Pure. */
export function leasedWords(n) {
  return (n ? `${int(n)}: ` : "none now: ") + "requests set aside in advance for the gateway processes (escrow leases), "
    + "so each admits without locking this budget; not used yet, they count against the request limit until used "
    + "or given back (when the budget runs short, or the lease expires)";
}

function facts(b) {
  const rows = [["limits", limitWords(b)],
    ["per model", h("span", { id: "model-limits" }, modelLimitWords(b).join("; ") || "none")],
    ["rates", h("span", { id: "rates" }, rateWords(b) || "none")],
    ["window", windowWords(b)], ["resets at", resetsWords(b)],
    ["parent", b.parent ? budgetLink(b.parent) : "none (a root budget)"],
    ["tasks drawing directly from it", int(b.tasks || 0)],
    ["leased requests", h("span", { id: "leased", title: LEASED_WORDS },
      leasedWords((b.current && b.current.leased_requests) || 0))],
    ["warning thresholds", (b.thresholds || []).length ? b.thresholds.map((t) => `${t} %`).join(", ")
      + " of each limit, announced once a window" : "none"],
    ["crossed this window", h("span", { id: "warnings" }, warningWords(b).join("; ") || "none")],
    ["first refusal this window", b.current && b.current.exhausted_at ? when(b.current.exhausted_at) : "none"],
    ["metadata", words(b.metadata)], ...extras(b, FIELDS)];
  return h("table", { id: "budget-facts", class: "facts" },
    h("tbody", {}, rows.map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, v)))));
}

function windowsTable(b) {
  const more = (w) => extras(w, WINDOW_FIELDS).map(([k, v]) => `${k} ${v}`).join(", ");
  const other = (b.windows || []).some((w) => more(w));  // fields a newer gateway adds
  return table("windows", ["window", "requests", "tokens in / out", "dollars", "warnings", "first refusal",
    other ? "other" : null]
    .filter(Boolean),
    (b.windows || []).map((w) => h("tr", {},
      h("td", {}, when(w.window_start), " – ", w.window_end ? when(w.window_end) : "now"),
      h("td", {}, int(w.admitted_requests || 0)),
      h("td", {}, `${int(w.input_tokens || 0)} / ${int(w.output_tokens || 0)}`),
      h("td", {}, usd(w.cost_usd || 0)),
      h("td", {}, warningWords({ current: w }).map((x) => x.split(" at ")[0]).join(", ")),
      h("td", {}, w.exhausted_at ? when(w.exhausted_at) : ""),
      other ? h("td", { class: "muted" }, more(w)) : null)),
    b.window ? "none yet: this is the budget's first window" : "none: a lifetime budget has one window");
}

function tasksTable(page) {
  return table("budget-tasks", ["task", "status", "counters / limits", "stop reason"],
    page.data.map((t) => h("tr", { "data-task": t.id }, h("td", {}, taskLink(t.id)), h("td", {}, badge(t.status)),
      h("td", {}, h("div", { class: "row meters" }, meters(t))),
      h("td", {}, t.stop_reason ? h("code", {}, t.stop_reason) : null))),
    "none yet: create one with taskgate tasks create --budget ID, or use a budget key");
}


/** The task limits a key gives each run, in words: "50 requests · $2.00 · 30 min". Pure. */
export function templateWords(template) {
  const t = template || {};
  const has = (k) => t[k] !== null && t[k] !== undefined;
  const parts = [has("request_limit") ? `${int(t.request_limit)} requests` : null,
    has("token_limit") ? `${int(t.token_limit)} tokens` : null,
    has("cost_limit_usd") ? usd(t.cost_limit_usd) : null,
    has("max_duration_s") ? duration(Number(t.max_duration_s)) : null,
    has("tool_call_limit") ? `${int(t.tool_call_limit)} tool calls` : null].filter(Boolean);
  return parts.length ? parts.join(" · ") : "the gateway's defaults";
}

const KEY_LIMITS = [["request_limit", "requests"], ["token_limit", "tokens"], ["cost_limit_usd", "dollars (USD)"],
  ["max_duration_s", "max duration (s)"]];

// What the keys card holds across the page's refreshes: the key just created (its secret is
// shown once, kept in memory only, until dismissed or the page is left) and the key whose
// revocation waits for a confirmation.
const keyState = { budget: null, created: null, confirming: null };

// The kill switch waiting for a confirmation ("pause" or "resume"), with the reason typed.
const pauseState = { budget: null, confirming: null };

/** What pausing does, in words, for the confirmation. Pure. */
export function pauseWords(b) {
  const nested = (b.children || []).length;
  return `Pause budget ${b.id}? Every request of its ${int(b.tasks || 0)} task(s)`
    + (nested ? ` and of the tasks of its ${int(nested)} nested budget(s)` : "")
    + " is refused, and their open requests are cut in every gateway, until it is resumed. The tasks themselves "
    + "are not stopped.";
}

function pauseCard(ctx, b, rerender) {
  const path = "/admin/budgets/" + encodeURIComponent(b.id);
  const msg = h("span", { class: "error", id: "pause-msg" });
  const reason = h("input", { id: "pause-reason", size: 40, placeholder: "why (quoted to every refused agent)" });
  const act = (what) => async () => {
    if (!reason.value.trim()) { msg.textContent = "Say why: the reason is required."; return; }
    try {
      await api("POST", `${path}/${what}`, { reason: reason.value.trim(), by: "dashboard" });
      pauseState.confirming = null; rerender();
    } catch (err) { if (err instanceof AuthError) return ctx.fail(err); msg.textContent = err.message; }
  };
  const cancel = h("button", { id: "cancel-pause", onclick: () => { pauseState.confirming = null; rerender(); } },
    "Cancel");
  let body;
  if (pauseState.confirming === "pause") {
    body = h("div", { class: "confirm" }, h("p", {}, pauseWords(b)),
      h("div", { class: "row" }, h("label", {}, "reason", reason),
        h("button", { class: "danger", id: "confirm-pause", onclick: act("pause") }, "Pause budget"), cancel), msg);
  } else if (pauseState.confirming === "resume") {
    body = h("div", {}, h("p", {}, `Resume budget ${b.id}? Its tasks are admitted again at their next request.`),
      h("div", { class: "row" }, h("label", {}, "reason", reason),
        h("button", { class: "primary", id: "confirm-resume", onclick: act("resume") }, "Resume budget"), cancel),
      msg);
  } else if (b.paused_at) {
    body = h("div", {}, h("p", { class: "sentence", id: "paused-words" },
      `Paused since ${when(b.paused_at)} by ${b.paused_by || "?"}: ${b.paused_reason || ""}. Every task under it `
      + "is refused until it is resumed."),
    h("button", { id: "resume", onclick: () => { pauseState.confirming = "resume"; rerender(); } }, "Resume…"));
  } else {
    body = h("div", { class: "row" }, h("span", { class: "muted" }, "Stop everything this budget's agents are doing, "
      + "now: every task under it and its nested budgets is refused and its open requests cut."),
    h("button", { class: "danger", id: "pause", onclick: () => { pauseState.confirming = "pause"; rerender(); } },
      "Pause…"));
  }
  return h("div", { class: "card" + (b.paused_at ? " stopbox" : ""), id: "pause-card" },
    h("h2", {}, "Kill switch"), body);
}

/** Whether the operator is busy in the keys card (typing, or confirming): no refresh then. */
function keysBusy() {
  if (pauseState.confirming !== null) return true;
  const card = document.getElementById("keys-card");
  if (!card) return false;
  return keyState.confirming !== null || card.contains(document.activeElement)
    || [...card.querySelectorAll("input")].some((i) => i.value.trim() !== "");
}

function exportsText(key) {
  const base = location.origin;
  return `export OPENAI_BASE_URL=${base}/v1 OPENAI_API_KEY=${key}\n`
    + `export ANTHROPIC_BASE_URL=${base} ANTHROPIC_API_KEY=${key}`;
}

function keysCard(ctx, b, keys, rerender) {
  const path = "/admin/budgets/" + encodeURIComponent(b.id) + "/keys";
  const msg = h("span", { class: "error", id: "keys-msg" });
  const failed = (err) => { if (err instanceof AuthError) return ctx.fail(err); msg.textContent = err.message; };
  const inputs = {};
  const form = h("form", { class: "row", id: "key-form", onsubmit: async (e) => {
    e.preventDefault();
    const template = {};
    for (const [name] of KEY_LIMITS) {
      const raw = inputs[name].value.trim();
      if (raw !== "") template[name] = Number(raw);
    }
    try {
      const key = await api("POST", path, { template });
      keyState.created = key; keyState.confirming = null;
      for (const input of Object.values(inputs)) input.value = "";
      rerender();
    } catch (err) { failed(err); }
  } }, KEY_LIMITS.map(([name, label]) => {
    inputs[name] = h("input", { name, type: "number", min: 0, step: "any", size: 8,
                               placeholder: name === "request_limit" ? "default" : "none" });
    return h("label", {}, label, inputs[name]);
  }), h("button", { type: "submit", class: "primary", id: "create-key" }, "Create key"), msg);
  const created = keyState.created;
  const shown = created ? h("div", { class: "newkey", id: "new-key" },
    h("p", {}, "Key ", h("code", {}, created.id), " created. ", h("strong", {}, "It is shown only now"),
      ": copy it into the agent's environment."),
    h("pre", { id: "new-key-exports" }, exportsText(created.key)),
    h("button", { type: "button", id: "dismiss-key", onclick: () => { keyState.created = null; rerender(); } },
      "I have copied it")) : null;
  const rows = keys.map((k) => {
    const revoked = !!k.revoked_at;
    let action = null;
    if (!revoked && keyState.confirming === k.id) {
      action = h("span", { class: "confirm" }, `Revoke ${k.id}? Its next request is refused; the tasks of its runs stay. `,
        h("button", { class: "danger", id: "confirm-revoke", onclick: async () => {
          try { await api("DELETE", path + "/" + encodeURIComponent(k.id)); keyState.confirming = null; rerender(); }
          catch (err) { failed(err); }
        } }, "Revoke key"), " ",
        h("button", { id: "cancel-revoke", onclick: () => { keyState.confirming = null; rerender(); } }, "Cancel"));
    } else if (!revoked) {
      action = h("button", { class: "danger revoke", onclick: () => { keyState.confirming = k.id; rerender(); } }, "Revoke…");
    }
    return h("tr", { "data-key": k.id, class: revoked ? "revoked" : null },
      h("td", {}, h("code", {}, k.id)), h("td", {}, when(k.created_at)),
      h("td", {}, revoked ? `revoked ${when(k.revoked_at)}` : h("span", { class: "badge active" }, "active")),
      h("td", {}, templateWords(k.template)), h("td", {}, action));
  });
  return h("div", { class: "card", id: "keys-card" }, h("h2", {}, "Budget keys"),
    h("p", { class: "muted" }, "A budget key is an API key for agents: each run that uses it gets a task of its own ",
      "with the limits below, drawing from this budget. Runs are told apart by the ", h("code", {}, "x-taskgate-run"),
      " header or the agent's session header. The key itself is shown once, when it is created."),
    shown,
    table("keys", ["key", "created", "state", "each run's task limits", ""], rows,
      "none yet: create one below (or taskgate budgets key-create " + b.id + ")"),
    h("h3", {}, "New key: each run's task limits (empty: no limit; requests: the gateway's default)"), form);
}

export async function budgetView(ctx, id) {
  const path = "/admin/budgets/" + encodeURIComponent(id);
  const taskKey = "taskgate.budgetTasks." + id, childKey = "taskgate.budgetChildren." + id;
  const taskPages = cursors(taskKey), childPages = cursors(childKey);
  const after = (pages) => pages[pages.length - 1] ? "&after=" + encodeURIComponent(pages[pages.length - 1]) : "";
  if (keyState.budget !== id) Object.assign(keyState, { budget: id, created: null, confirming: null });
  if (pauseState.budget !== id) Object.assign(pauseState, { budget: id, confirming: null });
  const [b, tasks, children, keys] = await Promise.all([api("GET", path),
    api("GET", `/admin/tasks?budget=${encodeURIComponent(id)}&limit=${TASKS_PAGE}` + after(taskPages)),
    api("GET", `/admin/budgets?parent=${encodeURIComponent(id)}&limit=${CHILDREN_PAGE}` + after(childPages)),
    api("GET", path + "/keys")]);
  if (decodeURIComponent(location.hash) !== "#/budget/" + id) return;  // the operator moved on meanwhile
  const rerender = () => budgetView(ctx, id).catch(ctx.fail);
  // "tasks 51–55 ← previous next →", only when there is more than one page
  const pager = (key, pages, page, size, what) => (pages.length > 1 || page.has_more
    ? h("div", { class: "toolbar" }, h("span", { class: "muted" }, page.data.length
      ? `${what} ${(pages.length - 1) * size + 1}–${(pages.length - 1) * size + page.data.length}` : `no more ${what}`),
    pageButtons(key, pages, page, rerender, what + "-")) : null);
  show(ctx.main,
    h("p", {}, h("a", { href: "#/budgets" }, "← all budgets")),
    h("div", { class: "card" }, h("h2", { id: "budget-title" }, b.id, " ", stateBadge(b)),
      h("div", { class: "row", id: "budget-meters" }, budgetMeters(b)), facts(b)),
    pauseCard(ctx, b, rerender),
    keysCard(ctx, b, keys.data, rerender),
    h("div", { class: "card" }, h("h2", {}, "Windows before this one"), windowsTable(b)),
    h("div", { class: "card" }, h("h2", {}, "Tasks"),
      pager(taskKey, taskPages, tasks, TASKS_PAGE, "tasks"), tasksTable(tasks)),
    h("div", { class: "card" }, h("h2", {}, "Nested budgets"),
      pager(childKey, childPages, children, CHILDREN_PAGE, "budgets"),
      table("children", BUDGET_HEADERS, children.data.map((c) => budgetRow(c, 0, 0)),
        "none: no budget nests in this one")));
  ctx.timer = setInterval(() => {
    if (keysBusy()) return;  // not while the operator types a key's limits or confirms a revocation
    if (decodeURIComponent(location.hash) === "#/budget/" + id) { clearInterval(ctx.timer); rerender(); }
  }, REFRESH_MS);
}
