// The task list (#/tasks): status filter, counters against limits, pages of 100 by id.
import { api, badge, cursors, h, meters, pageButtons, show, table, taskLink } from "./lib.js";

const PAGE = 100;
const REFRESH_MS = 3000;

const PAGES_KEY = "taskgate.pages";  // page cursors (lib.js cursors)

export async function listView(ctx) {
  const filter = sessionStorage.getItem("taskgate.filter") || "";
  const pages = cursors(PAGES_KEY);
  const after = pages[pages.length - 1];
  const rerender = () => listView(ctx).catch(ctx.fail);
  const select = h("select", { id: "status-filter", onchange: () => {
    sessionStorage.setItem("taskgate.filter", select.value); sessionStorage.removeItem(PAGES_KEY); rerender(); } },
    ["", "active", "stopped"].map((s) => h("option", { value: s, selected: s === filter }, s || "all")));
  const auto = h("input", { type: "checkbox", id: "auto-refresh", checked: sessionStorage.getItem("taskgate.auto") !== "off",
    onchange: () => { sessionStorage.setItem("taskgate.auto", auto.checked ? "on" : "off"); } });
  const query = `/admin/tasks?limit=${PAGE}` + (filter ? "&status=" + filter : "")
    + (after ? "&after=" + encodeURIComponent(after) : "");
  const data = await api("GET", query);
  if (!location.hash.startsWith("#/tasks")) return;  // the operator moved on meanwhile
  const first = (pages.length - 1) * PAGE + 1;
  const rows = data.data.map((t) => h("tr", { "data-task": t.id },
    h("td", {}, taskLink(t.id)),
    h("td", {}, badge(t.status)),
    h("td", {}, h("div", { class: "row meters" }, meters(t))),
    h("td", {}, t.stop_reason ? h("code", {}, t.stop_reason) : null),
    h("td", { class: "sentence" }, t.stop_message)));
  const span = data.data.length ? `tasks ${first}–${first + data.data.length - 1}` : "no tasks";
  show(ctx.main,
    h("div", { class: "toolbar" }, h("label", {}, "status", select),
      h("label", {}, "auto-refresh", auto), h("span", { class: "muted", id: "page-span" }, span),
      pageButtons(PAGES_KEY, pages, data, rerender, "")),
    table("tasks", ["task", "status", "counters / limits", "stop reason", "why it stopped"], rows,
          filter ? `no ${filter} tasks yet` : "none yet: create one with taskgate tasks create"));
  ctx.timer = setInterval(() => {
    if (auto.checked && location.hash.startsWith("#/tasks")) { clearInterval(ctx.timer); rerender(); }
  }, REFRESH_MS);
}
