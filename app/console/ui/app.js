// taskgate dashboard: plain JS modules over the admin API (/admin); no network but the gateway.
// Routes: #/ overview, #/tasks the task list, #/task/ID one task, #/budgets the budgets,
// #/budget/ID one budget.
import { AuthError, TOKEN_KEY, h, show } from "./lib.js";
import { listView } from "./tasks.js";
import { taskView } from "./task.js";
import { overviewView } from "./overview.js";
import { budgetsView } from "./budgets.js";
import { budgetView } from "./budget.js";

const main = document.getElementById("main");
const ctx = { main, timer: null, fail, route };

function stopTimer() { clearInterval(ctx.timer); ctx.timer = null; }

function loginView(message) {
  stopTimer();
  const input = h("input", { type: "password", id: "token", size: 40, placeholder: "TASKGATE_ADMIN_TOKEN",
                             autocomplete: "off" });
  const form = h("form", { class: "card", id: "login", onsubmit: (e) => {
    e.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    route();
  } }, h("h2", {}, "Admin token"),
    h("p", {}, "The ", h("code", {}, "TASKGATE_ADMIN_TOKEN"), " the gateway was started with. If none was set, ",
      "taskgate generated one: with the embedded database it is kept in ", h("code", {}, "<data dir>/admin_token"),
      " (by default ", h("code", {}, "~/.local/share/taskgate/admin_token"), ", readable only by the user running ",
      "the gateway: ", h("code", {}, "cat ~/.local/share/taskgate/admin_token"), "); with an external database it ",
      "was printed once at start-up."),
    h("p", { class: "muted" }, "Kept in this browser tab's session storage only."),
    message ? h("p", { class: "error" }, message) : null,
    h("div", { class: "row" }, input, h("button", { type: "submit", class: "primary" }, "Open")));
  show(main, form);
  input.focus();
}

function fail(err) {
  if (err instanceof AuthError) return loginView(err.message);
  show(main, h("p", { class: "error", id: "page-error" }, err.message || String(err)));
}

function markNav(name) {
  for (const a of document.querySelectorAll("header nav a")) a.classList.toggle("here", a.dataset.nav === name);
}

function route() {
  stopTimer();
  const logout = document.getElementById("logout");
  if (!sessionStorage.getItem(TOKEN_KEY)) { logout.hidden = true; markNav(""); return loginView(); }
  logout.hidden = false;
  const m = location.hash.match(/^#\/task\/(.+)$/);
  const mb = location.hash.match(/^#\/budget\/(.+)$/);
  let page;
  if (m) { markNav("tasks"); page = taskView(ctx, decodeURIComponent(m[1])); }
  else if (mb) { markNav("budgets"); page = budgetView(ctx, decodeURIComponent(mb[1])); }
  else if (location.hash.startsWith("#/budgets")) { markNav("budgets"); page = budgetsView(ctx); }
  else if (location.hash.startsWith("#/tasks")) { markNav("tasks"); page = listView(ctx); }
  else { markNav("overview"); page = overviewView(ctx); }
  page.catch(fail);
}

document.getElementById("logout").addEventListener("click", () => { sessionStorage.removeItem(TOKEN_KEY); route(); });
window.addEventListener("hashchange", route);
route();
