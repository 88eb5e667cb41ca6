// The operator's console: draws the view the page names (body[data-view]) from the
// console's JSON. Every value from a task goes into the DOM as text (textContent, or
// an attribute set by name); nothing is ever parsed as HTML.
"use strict";

(function () {
  const REFRESH_MS = 2000;
  const csrf = document.querySelector('meta[name="csrf-token"]').getAttribute("content");
  const app = document.getElementById("app");
  const live = document.getElementById("live");
  const params = new URLSearchParams(window.location.search);

  // An element with text or children; `attrs` set by name, never as markup.
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value !== undefined && value !== null) node.setAttribute(name, String(value));
    }
    for (const child of children) {
      if (child === undefined || child === null) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  // Headings after the first `text` columns are of numbers, aligned as they are.
  function table(id, headings, rows, text) {
    const head = el("tr", {}, ...headings.map((h, i) =>
      el("th", { scope: "col", class: text !== undefined && i >= text ? "num" : null }, h)));
    return el("table", { id: id }, el("thead", {}, head), el("tbody", {}, ...rows));
  }

  function section(title, id, ...content) {
    return el("section", { id: id }, el("h2", {}, title), ...content);
  }

  function age(ms) {
    if (ms === null || ms === undefined) return "—";
    const s = Math.floor(ms / 1000);
    if (s < 60) return s + " s";
    if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
    if (s < 86400) return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
    return Math.floor(s / 86400) + " d " + Math.floor((s % 86400) / 3600) + " h";
  }

  function upstreamLabel(name) {
    return name === "" ? "/mcp" : "/mcp/" + name;
  }

  function taskHref(taskId, upstream) {
    const query = upstream ? "?upstream=" + encodeURIComponent(upstream) : "";
    return "/admin/ui/tasks/" + encodeURIComponent(taskId) + query;
  }

  function statusBadge(status) {
    return el("span", { class: "badge status-" + status, "data-status": status }, status);
  }

  async function getJson(url) {
    const reply = await fetch(url, { credentials: "same-origin", cache: "no-store" });
    if (reply.status === 401) {
      window.location.assign("/admin/ui");
      throw new Error("signed out");
    }
    const body = await reply.json();
    if (!reply.ok) throw new Error(body.error || "HTTP " + reply.status);
    return body;
  }

  function showLive(ok, text) {
    live.textContent = text;
    live.className = ok ? "status ok" : "status failing";
  }

  // Calls `load` now and every REFRESH_MS, never two at once.
  function every(load) {
    let timer = null;
    const tick = async () => {
      try {
        await load();
        showLive(true, "live · " + new Date().toLocaleTimeString());
      } catch (e) {
        showLive(false, "not updating: " + e.message);
      }
      timer = window.setTimeout(tick, REFRESH_MS);
    };
    tick();
    return () => window.clearTimeout(timer);
  }

  // ---- Overview ----

  function drawOverview(o) {
    const waiting = o.waiting.length === 0
      ? el("p", { class: "muted", id: "nothing-waiting" }, "Nothing is waiting for a person.")
      : table("waiting-table", ["Task", "Upstream", "Tool", "Asks", "Status message", "Age"],
        o.waiting.map((t) => el("tr", { "data-task": t.taskId },
          el("td", {}, el("a", { href: taskHref(t.taskId, t.upstream) }, t.taskId)),
          el("td", {}, upstreamLabel(t.upstream)),
          el("td", {}, t.tool || "—"),
          el("td", { class: "asks" }, t.asks || (t.pendingInput + " input request(s)")),
          el("td", {}, t.statusMessage || ""),
          el("td", {}, age(t.ageMs)))));

    const upstreams = table("upstreams-table",
      ["Path", "Ready", "Running tasks", "Held MRTR calls", "Runners here", "Held calls here", "Deferred calls here"],
      o.upstreams.map((u) => el("tr", { "data-upstream": u.path },
        el("td", {}, u.path),
        el("td", {}, u.ready ? el("span", { class: "badge ready" }, "ready")
          : el("span", { class: "badge not-ready", title: u.notReady }, "not ready: " + u.notReady)),
        el("td", { class: "num" }, u.runningTasks),
        el("td", { class: "num" }, u.heldCalls),
        el("td", { class: "num" }, u.runnersHere),
        el("td", { class: "num" }, u.heldCallsHere),
        el("td", { class: "num" }, u.deferredCallsHere))), 2);

    const counts = table("counts-table",
      ["Path", "working", "input_required", "completed", "failed", "cancelled"],
      o.upstreams.map((u) => {
        const c = u.counts;
        const unfinished = (n) => (c.unfinishedExact ? n : "≥ " + n);
        return el("tr", { "data-upstream": u.path },
          el("td", {}, u.path),
          el("td", { class: "num", "data-count": "working" }, unfinished(c.working)),
          el("td", { class: "num", "data-count": "input_required" }, unfinished(c.inputRequired)),
          el("td", { class: "num" }, c.completed),
          el("td", { class: "num" }, c.failed),
          el("td", { class: "num" }, c.cancelled));
      }), 1);
    const examined = o.upstreams.map((u) => u.counts.newestExamined).reduce((a, b) => Math.max(a, b), 0);

    const instances = table("instances-table", ["Instance", "Lease", "Lease age", "Tasks owned"],
      o.instances.map((i) => el("tr", { "data-instance": i.instance },
        el("td", {}, i.instance, i.self ? el("span", { class: "badge" }, "this one") : null),
        el("td", {}, i.leaseLive ? el("span", { class: "badge ready" }, "live")
          : el("span", { class: "badge not-ready" }, "lapsed")),
        el("td", {}, i.leaseLive ? age(i.leaseAgeMs) : "—"),
        el("td", { class: "num" }, i.tasksOwned))), 3);

    app.replaceChildren(
      el("h1", {}, "Overview"),
      el("p", { class: "muted" }, "Answered by instance ", el("strong", {}, o.instance), " at " + o.generatedAt),
      section("Waiting for a person (input_required)", "waiting", waiting),
      section("Upstreams", "upstreams", upstreams),
      section("Tasks by status", "counts", counts,
        el("p", { class: "muted" }, "working and input_required: every unfinished task; completed, failed and cancelled: among the newest " + examined + " tasks.")),
      section("Instances sharing the store", "instances", instances));
  }

  function overview() {
    every(async () => drawOverview(await getJson("/admin/ui/api/overview")));
  }

  // ---- Task table ----

  const FILTERS = ["upstream", "status", "tool", "principal", "age"];
  const AGES = [
    ["", "any age"], ["newerThan=5m", "newer than 5 min"], ["newerThan=1h", "newer than 1 h"],
    ["newerThan=24h", "newer than 24 h"], ["olderThan=5m", "older than 5 min"],
    ["olderThan=1h", "older than 1 h"], ["olderThan=24h", "older than 24 h"],
  ];
  const STATUSES = ["", "working", "input_required", "completed", "failed", "cancelled"];

  function select(name, options, chosen) {
    return el("select", { name: name, id: "filter-" + name },
      ...options.map(([value, label]) => {
        const option = el("option", { value: value }, label);
        option.selected = value === chosen;
        return option;
      }));
  }

  async function tasks() {
    const upstreams = await getJson("/admin/ui/api/upstreams");
    const chosen = Object.fromEntries(FILTERS.map((f) => [f, params.get(f) || ""]));
    const form = el("form", { id: "filters", class: "filters" },
      el("label", {}, "Upstream ", select("upstream",
        upstreams.map((u) => [u.name, u.path]), chosen.upstream)),
      el("label", {}, "Status ", select("status",
        STATUSES.map((s) => [s, s || "any status"]), chosen.status)),
      el("label", {}, "Tool ", el("input", { name: "tool", id: "filter-tool", value: chosen.tool })),
      el("label", {}, "Principal ", el("input", { name: "principal", id: "filter-principal", value: chosen.principal })),
      el("label", {}, "Age ", select("age", AGES, chosen.age)),
      el("button", { type: "submit", id: "filter-apply" }, "Apply"));
    const body = el("div", { id: "task-page" });
    app.replaceChildren(el("h1", {}, "Tasks"), form, body);

    // Cursors of the pages before this one, to go back.
    const before = [];
    let cursor = null;
    const load = async () => {
      const query = new URLSearchParams();
      for (const f of ["upstream", "status", "tool", "principal"]) {
        if (chosen[f]) query.set(f, chosen[f]);
      }
      if (chosen.age) {
        const [key, value] = chosen.age.split("=");
        query.set(key, value);
      }
      if (params.get("limit")) query.set("limit", params.get("limit"));
      if (cursor) query.set("cursor", cursor);
      const page = await getJson("/admin/ui/api/tasks?" + query.toString());
      drawTaskTable(body, page, before.length + 1, {
        newer: before.length > 0 ? () => { cursor = before.pop(); load(); } : null,
        older: page.nextCursor ? () => { before.push(cursor); cursor = page.nextCursor; load(); } : null,
      });
    };
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const data = new FormData(form);
      const next = new URLSearchParams();
      for (const f of FILTERS) {
        const value = String(data.get(f) || "").trim();
        chosen[f] = value;
        if (value) next.set(f, value);
      }
      window.history.replaceState(null, "", "/admin/ui/tasks" + (next.toString() ? "?" + next : ""));
      before.length = 0;
      cursor = null;
      load().catch((e) => showLive(false, e.message));
    });
    try {
      await load();
      showLive(true, "loaded · " + new Date().toLocaleTimeString());
    } catch (e) {
      showLive(false, e.message);
    }
  }

  function drawTaskTable(body, page, number, go) {
    const rows = page.tasks.map((t) => el("tr", { "data-task": t.taskId },
      el("td", {}, el("a", { href: taskHref(t.taskId, t.upstream), class: "task-link" }, t.taskId)),
      el("td", {}, statusBadge(t.status)),
      el("td", {}, t.tool || "—"),
      el("td", {}, upstreamLabel(t.upstream)),
      el("td", { class: "principal", title: t.principal }, t.principal),
      el("td", {}, t.owner),
      el("td", {}, t.createdAt),
      el("td", {}, t.statusMessage || "")));
    const pager = el("div", { class: "pager" },
      el("button", { type: "button", id: "page-newer", disabled: go.newer ? null : "" }, "← Newer"),
      el("span", { id: "page-number" }, "page " + number),
      el("button", { type: "button", id: "page-older", disabled: go.older ? null : "" }, "Older →"));
    if (go.newer) pager.querySelector("#page-newer").addEventListener("click", go.newer);
    if (go.older) pager.querySelector("#page-older").addEventListener("click", go.older);
    const empty = page.tasks.length === 0
      ? el("p", { class: "muted", id: "no-tasks" }, page.nextCursor
        ? "No match among the tasks examined; older ones may match."
        : "No task matches.")
      : null;
    body.replaceChildren(
      table("tasks-table", ["Task", "Status", "Tool", "Upstream", "Principal", "Owner", "Created", "Message"], rows),
      empty, pager);
  }

  // ---- A task ----

  function field(label, value, id) {
    return [el("dt", {}, label), el("dd", { id: id }, value === null || value === undefined ? "—" : value)];
  }

  function drawTask(t, cancel) {
    const facts = el("dl", { class: "facts" },
      ...field("Status", statusBadge(t.status), "task-status"),
      ...field("Tool", t.tool, "task-tool"),
      ...field("Upstream", t.path, "task-upstream"),
      ...field("Principal", t.principal, "task-principal"),
      ...field("Owner", t.owner + " (lease " + t.ownerLease + ")", "task-owner"),
      ...field("Takeovers", t.takeovers, "task-takeovers"),
      ...field("Created", t.createdAt + " (" + age(t.ageMs) + " ago)", "task-created"),
      ...field("Updated", t.updatedAt, "task-updated"),
      ...field("Expires", t.expiresAt, "task-expires"),
      ...field("Status message", t.statusMessage, "task-message"));

    const inputs = t.inputs.length === 0
      ? el("p", { class: "muted" }, "No input request is waiting.")
      : el("ul", { id: "task-inputs" }, ...t.inputs.map((i) => el("li", { "data-key": i.key },
        el("code", {}, i.method), " ", el("span", { class: "input-message" }, i.message || "(no message)"))));

    const parts = [
      el("h1", {}, "Task ", el("code", { id: "task-id" }, t.taskId)),
      el("p", {}, el("a", { href: "/admin/ui/tasks" + (t.upstream ? "?upstream=" + encodeURIComponent(t.upstream) : "") }, "← all tasks")),
      cancel,
      facts,
      section("Waiting for input", "inputs", inputs),
    ];
    if (t.error) {
      parts.push(section("Error", "error", el("p", { id: "task-error" }, t.error.message + " (code " + t.error.code + ")")));
    }
    if (t.resultBytes !== null && t.resultBytes !== undefined) {
      const result = [el("p", { id: "task-result-size" }, "Result: " + t.resultBytes + " bytes.")];
      if (t.result) result.push(shown(t.result, "task-result"));
      else if (!t.showResults) result.push(el("p", { class: "muted" }, "Results are shown only when the gateway runs with --admin-show-results."));
      parts.push(section("Result", "result", ...result));
    }
    if (t.arguments) parts.push(section("Arguments", "arguments", shown(t.arguments, "task-arguments")));
    app.replaceChildren(...parts);
  }

  function shown(value, id) {
    const note = value.truncated ? el("p", { class: "muted" }, "The first " + value.text.length + " of " + value.bytes + " bytes.") : null;
    return el("div", {}, el("pre", { id: id }, value.text), note);
  }

  // The Cancel button and its confirmation, kept across refreshes.
  function cancelControl(taskId, upstream, refresh) {
    const box = el("div", { class: "cancel", id: "cancel-box" });
    const ask = el("button", { type: "button", id: "cancel-task", class: "danger" }, "Cancel task");
    const confirmBox = el("div", { class: "confirm", id: "cancel-confirm", hidden: "" },
      el("span", {}, "Cancel this task? The upstream is told to stop."),
      el("button", { type: "button", id: "cancel-yes", class: "danger" }, "Yes, cancel it"),
      el("button", { type: "button", id: "cancel-no" }, "No, keep it running"));
    const outcome = el("p", { id: "cancel-outcome", role: "status" });
    ask.addEventListener("click", () => { confirmBox.hidden = false; ask.hidden = true; });
    confirmBox.querySelector("#cancel-no").addEventListener("click", () => { confirmBox.hidden = true; ask.hidden = false; });
    confirmBox.querySelector("#cancel-yes").addEventListener("click", async () => {
      confirmBox.hidden = true;
      const query = upstream ? "?upstream=" + encodeURIComponent(upstream) : "";
      try {
        const reply = await fetch("/admin/ui/api/tasks/" + encodeURIComponent(taskId) + "/cancel" + query, {
          method: "POST", credentials: "same-origin", headers: { "X-CSRF-Token": csrf },
        });
        const body = await reply.json();
        outcome.textContent = reply.ok
          ? (body.result === "cancelled" ? "Cancelled." : "The task had already ended.")
          : "Not cancelled: " + body.error;
      } catch (e) {
        outcome.textContent = "Not cancelled: " + e.message;
      }
      ask.hidden = false;
      refresh();
    });
    box.append(ask, confirmBox, outcome);
    return box;
  }

  function task() {
    const taskId = decodeURIComponent(window.location.pathname.split("/").pop());
    const upstream = params.get("upstream") || "";
    const query = upstream ? "?upstream=" + encodeURIComponent(upstream) : "";
    let cancel = null;
    let latest = null;
    const load = async () => {
      latest = await getJson("/admin/ui/api/tasks/" + encodeURIComponent(taskId) + query);
      if (!cancel) cancel = cancelControl(taskId, upstream, () => load().then(redraw));
      redraw();
    };
    const redraw = () => {
      cancel.querySelector("#cancel-task").disabled = latest.ended;
      cancel.hidden = latest.ended && !cancel.querySelector("#cancel-outcome").textContent;
      drawTask(latest, cancel);
    };
    every(load);
  }

  const views = { overview: overview, tasks: tasks, task: task };
  const view = views[document.body.dataset.view];
  if (view) view();
})();
