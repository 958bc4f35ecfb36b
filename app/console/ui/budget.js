// One budget (#/budget/ID): its current window's spend against its limits, the windows
// before, the tasks drawing from it (linking to their pages) and the budgets nested in it,
// each list in pages.
import { api, badge, budgetLink, cursors, extras, h, int, meters, pageButtons, show, table, taskLink, usd, when }
  from "./lib.js";
import { BUDGET_HEADERS, WINDOW_FIELDS, budgetMeters, budgetRow, resetsWords, stateBadge, windowWords }
  from "./budgets.js";
import { words } from "./task.js";

const TASKS_PAGE = 50;
const CHILDREN_PAGE = 50;
const REFRESH_MS = 5000;
const FIELDS = ["id", "parent", "depth", "request_limit", "token_limit", "cost_limit_usd", "window", "timezone",
  "metadata", "tasks", "children", "current", "windows", "created_at", "updated_at"];

function limitWords(b) {
  const parts = [b.request_limit !== null && b.request_limit !== undefined ? `${int(b.request_limit)} requests` : null,
    b.token_limit !== null && b.token_limit !== undefined ? `${int(b.token_limit)} tokens` : null,
    b.cost_limit_usd !== null && b.cost_limit_usd !== undefined ? usd(b.cost_limit_usd) : null].filter(Boolean);
  return parts.length ? parts.join(" · ") + (b.window ? ` per ${b.window}` : " in its lifetime")
    : "none: it groups and counts";
}

function facts(b) {
  const rows = [["limits", limitWords(b)], ["window", windowWords(b)], ["resets at", resetsWords(b)],
    ["parent", b.parent ? budgetLink(b.parent) : "none (a root budget)"],
    ["tasks drawing directly from it", int(b.tasks || 0)],
    ["first refusal this window", b.current && b.current.exhausted_at ? when(b.current.exhausted_at) : "none"],
    ["metadata", words(b.metadata)], ...extras(b, FIELDS)];
  return h("table", { id: "budget-facts", class: "facts" },
    h("tbody", {}, rows.map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, v)))));
}

function windowsTable(b) {
  const more = (w) => extras(w, WINDOW_FIELDS).map(([k, v]) => `${k} ${v}`).join(", ");
  const other = (b.windows || []).some((w) => more(w));  // fields a newer gateway adds
  return table("windows", ["window", "requests", "tokens in / out", "dollars", "first refusal", other ? "other" : null]
    .filter(Boolean),
    (b.windows || []).map((w) => h("tr", {},
      h("td", {}, when(w.window_start), " – ", w.window_end ? when(w.window_end) : "now"),
      h("td", {}, int(w.admitted_requests || 0)),
      h("td", {}, `${int(w.input_tokens || 0)} / ${int(w.output_tokens || 0)}`),
      h("td", {}, usd(w.cost_usd || 0)),
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

export async function budgetView(ctx, id) {
  const path = "/admin/budgets/" + encodeURIComponent(id);
  const taskKey = "taskgate.budgetTasks." + id, childKey = "taskgate.budgetChildren." + id;
  const taskPages = cursors(taskKey), childPages = cursors(childKey);
  const after = (pages) => pages[pages.length - 1] ? "&after=" + encodeURIComponent(pages[pages.length - 1]) : "";
  const [b, tasks, children] = await Promise.all([api("GET", path),
    api("GET", `/admin/tasks?budget=${encodeURIComponent(id)}&limit=${TASKS_PAGE}` + after(taskPages)),
    api("GET", `/admin/budgets?parent=${encodeURIComponent(id)}&limit=${CHILDREN_PAGE}` + after(childPages))]);
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
    h("div", { class: "card" }, h("h2", {}, "Windows before this one"), windowsTable(b)),
    h("div", { class: "card" }, h("h2", {}, "Tasks"),
      pager(taskKey, taskPages, tasks, TASKS_PAGE, "tasks"), tasksTable(tasks)),
    h("div", { class: "card" }, h("h2", {}, "Nested budgets"),
      pager(childKey, childPages, children, CHILDREN_PAGE, "budgets"),
      table("children", BUDGET_HEADERS, children.data.map((c) => budgetRow(c, 0, 0)),
        "none: no budget nests in this one")));
  ctx.timer = setInterval(() => {
    if (decodeURIComponent(location.hash) === "#/budget/" + id) { clearInterval(ctx.timer); rerender(); }
  }, REFRESH_MS);
}
