// The inspector's page: the list of runs, and a run's machine, timeline and memory, stepped with
// the slider or the arrow keys. Everything a run holds is text of its own (prompts, tool output,
// web pages): it reaches the page through textContent only, never as markup. The one piece of
// markup from the server is the machine's drawing, made by agentfsm.fsm.drawing with every name
// escaped.
"use strict";

const PAGE = 500;
const main = document.getElementById("main");
const where = document.getElementById("where");
let run = null; // the run shown: {key, summary, transitions, selected, asked}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === "text") node.textContent = value;
    else if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value);
  }
  for (const child of children) if (child != null) node.append(child);
  return node;
}

async function getJSON(url) {
  const response = await fetch(url, { credentials: "same-origin" });
  const body = await response.json().catch(() => ({ problem: `HTTP ${response.status}` }));
  if (!response.ok) throw new Error(body.problem || `HTTP ${response.status}`);
  return body;
}

function query(path, params) {
  return `${path}?${new URLSearchParams(params)}`;
}

function route() {
  if (!(location.hash || "").startsWith("#/run/")) leaveRun();
  const found = (location.hash || "#/").match(/^#\/run\/([^/]+)(?:\/(\d+))?$/);
  if (found) showRun(decodeURIComponent(found[1]), found[2] === undefined ? null : Number(found[2]));
  else showList();
}

// -- the list ---------------------------------------------------------------------------

async function showList() {
  run = null;
  where.textContent = "";
  let runs;
  let more;
  try {
    ({ runs, more } = await getJSON("/api/runs"));
  } catch (error) {
    main.replaceChildren(el("p", { class: "problem", text: error.message }));
    return;
  }
  if (!runs.length) {
    main.replaceChildren(el("p", { class: "note", text: "No trace or checkpoint was found under the paths given." }));
    return;
  }
  const head = el("tr", {}, ...["run", "agent", "kind", "state", "step", "stop reason", "worker", "started", "request", "file"]
    .map((name) => el("th", { text: name })));
  const body = el("tbody", {});
  const shown = { count: 0, asking: false };
  const count = el("p", { class: "note", id: "run-count" });
  const told = () => {
    const pending = Object.keys(more).length;
    count.textContent = `${runs.length}${pending ? "+" : ""} runs`;
    note.textContent = shown.count < runs.length || pending ? "more: scroll down" : "";
  };
  const showMore = async () => { // the rows come in pages, so a long list opens as fast as a short one
    if (shown.count >= runs.length) { // a manager's next page of runs, if it has one
      const [source] = Object.keys(more);
      if (source === undefined || shown.asking) return;
      shown.asking = true;
      try {
        const page = await getJSON(query("/api/runs/more", { source, offset: more[source] }));
        runs.push(...page.runs);
        more = page.more;
      } finally {
        shown.asking = false;
      }
    }
    const next = runs.slice(shown.count, shown.count + PAGE);
    body.append(...next.map(runRow));
    shown.count += next.length;
    told();
    const unfilled = document.body.offsetHeight < window.innerHeight + 400;
    if (unfilled && next.length && run === null && (shown.count < runs.length || Object.keys(more).length)) {
      await showMore(); // a screen not yet full takes the next page too
    }
  };
  const note = el("p", { class: "note", id: "more-runs" });
  main.replaceChildren(count, el("table", { class: "runs" }, el("thead", {}, head), body), note);
  await showMore();
  window.onscroll = () => {
    if (run === null && window.innerHeight + window.scrollY > document.body.offsetHeight - 400) showMore();
  };
}

function runRow(row) {
  const link = el("a", { href: `#/run/${encodeURIComponent(row.key)}`, text: row.run_id || row.key });
  if (row.problem) {
    return el("tr", { class: "unreadable", "data-key": row.key }, el("td", {}, link),
      el("td", { class: "problem", colspan: "8", text: row.problem }), el("td", { text: row.path }));
  }
  return el("tr", { "data-key": row.key },
    el("td", {}, link),
    el("td", { text: row.agent || "" }),
    el("td", { text: row.kind }),
    el("td", { class: `state-${row.state}`, text: row.state || "" }),
    el("td", { text: row.step ?? "" }),
    el("td", { text: row.stop_reason || "" }),
    el("td", { text: row.worker || "" }),
    el("td", { text: (row.started_at || "").replace("T", " ").slice(0, 19) }),
    el("td", { class: "request", text: row.request || "", title: row.request || "" }),
    el("td", { text: row.path }));
}

// -- a run ---------------------------------------------------------------------------------

async function showRun(key, at) {
  if (!run || run.key !== key) {
    leaveRun();
    let summary;
    try {
      summary = await getJSON(query("/api/run", { key }));
    } catch (error) {
      main.replaceChildren(el("p", { class: "problem", text: error.message }), el("a", { href: "#/", text: "All runs" }));
      return;
    }
    // a fork's events begin after the parent's transitions its trace starts with (none when it
    // begins at the fork point: a checkpoint's fork)
    const inherited = summary.forked_from && !summary.begins_after ? summary.forked_from.transition + 1 : 0;
    run = { key, summary, transitions: [], selected: null, asked: 0, following: at === null, transitionEvents: inherited,
      retries: {}, retrying: [], callEvents: 0 };
    layOut();
    await loadPage();
    if (summary.row.live) follow(); // an ended run's events too: its retries are only there
  }
  const last = run.summary.count - 1;
  await select(at === null ? last : Math.max(0, Math.min(at, last)));
}

function ended(summary) {
  // a managed run's status says (a paused run's trace holds a result too: the paused one)
  if (summary.status) return ["finished", "error", "cancelled"].includes(summary.status.state);
  return Boolean(summary.result);
}

function leaveRun() {
  if (run && run.events) run.events.close();
}

// -- a run that goes on: its events, then the page brought up to date ---------------------------

function follow() {
  const events = new EventSource(query("/api/run/events", { key: run.key }));
  const following = run;
  following.events = events;
  events.onmessage = (message) => {
    if (run !== following) return;
    const event = JSON.parse(message.data);
    if (event.kind === "text_delta") {
      const box = document.getElementById("streaming");
      box.hidden = false;
      box.textContent += event.data.text || "";
    } else if (event.kind === "llm_retry") {
      // a failed attempt of the call in flight (never in a trace: the run's events say it)
      const d = event.data;
      run.retrying.push(d);
      const box = document.getElementById("streaming");
      box.hidden = false;
      box.textContent += `\n[attempt ${d.attempt} failed: ${d.error}; trying again in ${d.wait_s.toFixed(2)} s]\n`;
    } else if (event.kind === "transition") {
      arrived(event.data); // shown at once, from the event itself; the refresh brings the rest
      refresh();
    } else if (event.kind !== "tool_call_delta" && event.kind !== "llm_call_started") {
      if (event.kind === "llm_call") { // the reply is whole: its text is in the memory from now on
        run.retries[run.callEvents++] = run.retrying;
        run.retrying = [];
        renderCalls();
        const box = document.getElementById("streaming");
        box.textContent = "";
        box.hidden = true;
      }
      refresh();
    }
  };
  events.addEventListener("end", () => { events.close(); if (run === following) refresh(); });
  events.addEventListener("problem", () => events.close());
}

function arrived(data) {
  // a flow's run carries its agents' events too: their transitions are theirs, not the run's
  if (run.summary.agent && data.agent && data.agent !== run.summary.agent) return;
  // the k-th transition event is the run's k-th transition: one the page holds already (from the
  // run's trace, or an event replayed from the start) is passed over
  const k = run.transitionEvents++;
  const list = document.getElementById("transitions");
  if (k !== run.transitions.length || !list) return;
  const t = {
    index: k, step: data.step, trigger: data.trigger, source: data.source, dest: data.dest,
    guards: data.guards.map(([name, held]) => ({ name, held })), stop_reason: data.stop_reason,
    error: data.error, duration_s: data.duration_s, edge: edgeOf(data),
  };
  const following = run.following || run.selected === null || run.selected >= run.summary.count - 1;
  run.transitions.push(t);
  run.summary.count = Math.max(run.summary.count, k + 1);
  run.summary.states[k] = t.dest;
  list.append(timelineItem(t));
  document.getElementById("slider").max = String(run.summary.count - 1);
  document.getElementById("no-transitions").textContent = "";
  if (following) select(k);
}

function edgeOf(data) {
  // the table's edge a transition took, told apart by its guards (as agentfsm.ui.reading does)
  const table = run.summary.table;
  const groups = {};
  for (const state of table.states) if (state.group) (groups[state.group] ||= []).push(state.name);
  const held = data.guards.filter(([, ok]) => ok).map(([name]) => name);
  const found = table.edges.findIndex((e) => e.trigger === data.trigger && e.dest === data.dest
    && (groups[e.source] || [e.source]).includes(data.source)
    && (e.guard ? held.includes(e.guard) : held.length === 0));
  return found < 0 ? null : found;
}

async function refresh() {
  if (run.refreshing) { run.again = true; return; }
  run.refreshing = true;
  const shown = run;
  try {
    do {
      run.again = false;
      const summary = await getJSON(query("/api/run", { key: shown.key }));
      if (run !== shown) return;
      const atEnd = shown.selected === null || shown.selected >= shown.summary.count - 1;
      const redraw = summary.svg !== shown.summary.svg;
      shown.summary = summary;
      renderSummary(redraw);
      while (shown.transitions.length < summary.count && run === shown) {
        const before = shown.transitions.length;
        await loadPage();
        if (shown.transitions.length === before) break;
      }
      if (run === shown && summary.count && (atEnd || shown.following)) await select(summary.count - 1);
      else if (run === shown && shown.selected !== null) markDiagram(shown.selected, shown.transitions[shown.selected]);
    } while (run === shown && run.again);
  } finally {
    shown.refreshing = false;
  }
}

// -- the page of a run ---------------------------------------------------------------------------

function layOut() {
  const slider = el("input", { type: "range", min: "0", max: "0", value: "0", id: "slider",
    "aria-label": "transition", oninput: (event) => { run.following = false; select(Number(event.target.value)); } });
  const stepper = el("div", { class: "stepper" },
    el("button", { id: "previous", text: "←", title: "previous transition (←)", onclick: () => step(-1) }),
    slider,
    el("button", { id: "next", text: "→", title: "next transition (→)", onclick: () => step(1) }),
    el("span", { id: "position" }));
  const timeline = el("div", { class: "timeline", onscroll: (event) => {
    const box = event.target;
    if (box.scrollTop + box.clientHeight > box.scrollHeight - 200) loadPage();
  } }, el("ol", { id: "transitions" }));
  main.replaceChildren(
    el("p", { class: "totals", id: "summary" }),
    el("p", { class: "note", id: "request" }),
    el("div", { class: "steering", id: "steering" }),
    el("div", { class: "plan", id: "plan" }),
    el("div", { class: "calls", id: "calls" }),
    el("p", { class: "note", id: "no-transitions" }),
    el("div", { class: "diagram", id: "diagram" }),
    el("pre", { class: "streaming", id: "streaming", hidden: "" }),
    stepper,
    el("div", { class: "columns" }, timeline, el("div", { class: "detail", id: "detail" })),
  );
  renderSummary(true);
}

function renderSummary(redraw) {
  if (!document.getElementById("diagram")) return; // the page moved on to another view meanwhile
  const s = run.summary;
  const row = s.row;
  where.textContent = `${row.run_id || row.key} · ${row.path}`;
  const usage = s.usage;
  const cost = usage.priced && s.llm_calls.length ? ` · $${usage.cost_usd.toFixed(4)}` : "";
  const state = s.status ? (s.status.held ? "held at a breakpoint" : s.status.state) : row.state || "?";
  const result = s.result
    ? `${s.result.state} · ${s.result.stop_reason} · ${s.result.steps} steps`
    : `${state} (no result recorded${row.live ? " yet" : ": running, killed, or a checkpoint"})`;
  const machine = s.table_source === "recorded" ? "" : ` · machine: ${s.table_source === "default"
    ? "the default table (not recorded)" : "the edges taken (not recorded)"}`;
  document.getElementById("summary").textContent = `${row.agent || ""} · ${result} · ${s.llm_calls.length} ` +
    `model calls · ${usage.input_tokens} in / ${usage.output_tokens} out tokens${cost}${machine}`;
  const request = document.getElementById("request");
  request.replaceChildren(s.request ? `Request: ${s.request}` : "");
  if (s.begins_after) request.append(` · its trace begins after ${s.begins_after.edges} edges, at the fork`);
  if (s.forked_from) {
    const parent = `${run.key.split("/")[0]}/${s.forked_from.run_id}`;
    request.append(" · forked from ", el("a", { class: "parent", href: `#/run/${encodeURIComponent(parent)}/${s.forked_from.transition}`,
      text: `${s.forked_from.run_id} at transition #${s.forked_from.transition}` }),
    s.forked_from.memory_edited ? " (memory edited)" : "");
  }
  document.getElementById("no-transitions").textContent = s.count ? ""
    : `No transition to show yet${row.live ? "" : ": the run's trace is whole when it ends"}.`;
  const diagram = document.getElementById("diagram");
  if (redraw) diagram.innerHTML = s.svg; // made by agentfsm.fsm.drawing, every name escaped
  for (const node of diagram.querySelectorAll(".taken")) node.classList.remove("taken");
  for (const count of diagram.querySelectorAll(".count")) count.textContent = "";
  for (const [edge, times] of Object.entries(s.taken)) {
    for (const path of diagram.querySelectorAll("path.edge[data-edges]")) {
      if (path.dataset.edges.split(" ").includes(edge)) path.classList.add("taken");
    }
    const label = diagram.querySelector(`.edge-label[data-edge="${edge}"]`);
    if (label) {
      label.classList.add("taken");
      label.querySelector(".count").textContent = ` ×${times}`;
    }
  }
  document.getElementById("slider").max = String(Math.max(0, s.count - 1));
  if (s.llm_calls.length === 0 || ended(s)) document.getElementById("streaming").hidden = true;
  renderSteering();
  renderPlan();
  renderCalls();
}

function renderPlan() {
  // a flow's plan: each step with its status, attempts and agent, linked to its agent's run
  const s = run.summary;
  const box = document.getElementById("plan");
  if (!s.plan) { box.replaceChildren(); return; }
  const runs = {};
  for (const r of s.agent_runs) runs[r.flow_step] = r;
  const items = s.plan.steps.map((step) => {
    const ran = runs[step.id];
    return el("li", { class: `step status-${step.status}`, "data-step": String(step.id) },
      el("span", { class: "n", text: `#${step.id}` }), ` [${step.agent}] ${step.text} · `,
      el("span", { class: "status", text: step.status }),
      ` · ${step.attempts} attempt${step.attempts === 1 ? "" : "s"} `,
      ran ? el("a", { href: `#/run/${encodeURIComponent(run.key + ran.key)}`, text: `its run (${ran.transitions} transitions)` }) : null,
      step.notes ? el("div", { class: "note", text: step.notes }) : null);
  });
  box.replaceChildren(el("h2", { text: `Plan: ${s.plan.title || ""}` }), el("ol", { class: "steps" }, ...items));
}

function renderCalls() {
  // every model call of the run: its step, model, tokens, cost, time, retries and error
  const s = run.summary;
  const box = document.getElementById("calls");
  if (!s.llm_calls.length) { box.replaceChildren(); return; }
  const rows = s.llm_calls.map((call, n) => {
    const usage = call.usage || {};
    return el("tr", { "data-call": String(n) },
      el("td", { text: String(n + 1) }), el("td", { text: String(call.step ?? "") }),
      el("td", { text: call.model || "" }),
      el("td", { text: String(usage.input_tokens ?? "") }), el("td", { text: String(usage.output_tokens ?? "") }),
      el("td", { text: usage.cost_usd == null ? "n/a" : `$${usage.cost_usd.toFixed(5)}` }),
      el("td", { text: call.duration_s == null ? "" : `${(call.duration_s * 1000).toFixed(1)} ms` }),
      retriesCell((run.retries || {})[n]),
      el("td", { class: call.error ? "problem" : "", text: call.error ? `${call.error.type}: ${call.error.message}` : "" }));
  });
  const head = el("tr", {}, ...["#", "step", "model", "in", "out", "cost", "time", "retries", "error"].map((n) => el("th", { text: n })));
  box.replaceChildren(el("details", {}, el("summary", { text: `Model calls (${s.llm_calls.length})` }),
    el("table", { class: "runs calls" }, el("thead", {}, head), el("tbody", {}, ...rows))));
}

function retriesCell(retries) {
  // a managed run's events tell its retries; a file's trace does not hold them ("")
  if (!retries) return el("td", { class: "retries", text: "" });
  return el("td", { class: "retries", text: String(retries.length),
    title: retries.map((r) => `attempt ${r.attempt}: ${r.error} (waited ${r.wait_s.toFixed(2)} s)`).join("\n") });
}

// -- steering a managed run: its decisions, its answers, its end ---------------------------------

async function post(verb, body) {
  const response = await fetch(`/api/run/${verb}`, {
    method: "POST", credentials: "same-origin",
    headers: { "Content-Type": "application/json" }, body: JSON.stringify({ key: run.key, ...body }),
  });
  const answer = await response.json().catch(() => ({ problem: `HTTP ${response.status}` }));
  const said = document.getElementById("steered");
  if (said) {
    said.className = response.ok ? "note" : "problem";
    said.textContent = response.ok ? `${verb}: sent` : answer.problem;
  }
  await refresh();
}

function renderSteering() {
  const box = document.getElementById("steering");
  const s = run.summary;
  const status = s.status;
  // drawn again only when what the run waits for changed: a refresh never drops what is being typed
  const drawn = JSON.stringify([status, ended(s)]);
  if (drawn === run.steering) return;
  run.steering = drawn;
  if (!status || ended(s)) {
    box.replaceChildren();
    return;
  }
  const pause = status.pause;
  const parts = [el("h2", { text: status.state === "paused" ? `Paused (pause ${pause})`
    : status.held ? "Held at a breakpoint" : `The run is ${status.state}` })];
  for (const call of status.pending_approval) {
    if (status.decided.includes(call.id)) continue;
    const args = el("textarea", { class: "arguments", rows: "3", "data-call": call.id });
    args.value = JSON.stringify(JSON.parse(call.arguments || "{}"), null, 1);
    const reason = el("input", { type: "text", placeholder: "why (the model reads it)", class: "reason" });
    parts.push(el("div", { class: "decision", "data-call": call.id },
      el("div", { class: "call", text: `${call.name} · ${call.id} waits for a decision` }), args,
      el("div", { class: "buttons" },
        el("button", { class: "approve", text: "Approve", onclick: () => {
          let edited;
          try { edited = JSON.parse(args.value); } catch (error) { alert(`The arguments are not JSON: ${error.message}`); return; }
          const same = JSON.stringify(edited) === JSON.stringify(JSON.parse(call.arguments || "{}"));
          post("approve", { call_id: call.id, pause, ...(same ? {} : { arguments: edited }) });
        } }),
        reason,
        el("button", { class: "reject", text: "Reject", onclick: () => post("reject", { call_id: call.id, pause, reason: reason.value || null }) }))));
  }
  for (const asked of status.pending_input) {
    parts.push(questionForm(asked.call, asked.question, pause));
  }
  if (status.plan) parts.push(planReview(status.plan, pause));
  if (status.breakpoints) parts.push(breakpointsPanel(status));
  parts.push(el("div", { class: "buttons" },
    el("button", { class: "cancel-run", text: "Cancel the run", onclick: () => post("cancel", {}) })),
  el("p", { id: "steered", class: "note" }));
  box.replaceChildren(...parts);
}

// A flow waiting for a decision on its plan: run it, run other steps (one a line, each with its
// [agent] tag; the steps not completed are offered to edit), or end the flow.
function planReview(plan, pause) {
  const open = plan.split("\n").map((line) => line.match(/^\d+\. \[[^✓\]]*\] (.*)$/))
    .filter(Boolean).map((found) => found[1]);
  const steps = el("textarea", { class: "plan-steps", rows: String(Math.max(3, open.length + 1)) });
  steps.value = open.join("\n");
  return el("section", { class: "plan-review" },
    el("h3", { text: "The plan waits for a decision" }),
    el("pre", { class: "plan", text: plan }),
    el("div", { class: "buttons" },
      el("button", { class: "approve-plan", text: "Run this plan", onclick: () => post("review", { verdict: "approve", pause }) }),
      el("button", { class: "cancel-plan", text: "Cancel the flow", onclick: () => post("review", { verdict: "cancel", pause }) })),
    el("p", { class: "note", text: "Or run these steps instead of those not completed, one a line:" }),
    steps,
    el("div", { class: "buttons" },
      el("button", { class: "edit-plan", text: "Run these steps", onclick: () => {
        const given = steps.value.split("\n").map((line) => line.trim()).filter(Boolean);
        if (!given.length) { alert("Give at least one step, or cancel the flow."); return; }
        post("review", { verdict: "edit", steps: given, pause });
      } })));
}

function breakpointsPanel(status) {
  // an app's run waits at these (after the edge into a state, before its work); step and continue
  // move it on from there, as the terminal debugger's verbs do
  const points = status.breakpoints;
  const named = (p) => p.state ? `state ${p.state}` : p.tool ? `tool ${p.tool}`
    : `${p.source || "*"} -> ${p.dest || "*"}${p.trigger ? ` on ${p.trigger}` : ""}`;
  const list = el("ul", { class: "breakpoints" }, ...points.map((p, i) => el("li", {},
    el("span", { text: named(p) }),
    el("button", { class: "remove", title: "remove", text: "×",
      onclick: () => post("breakpoints", { breakpoints: points.filter((_, j) => j !== i) }) }))));
  const table = run.summary.table;
  const choices = {
    state: table.states.map((state) => state.name),
    trigger: [...new Set(table.edges.map((edge) => edge.trigger))],
    tool: [],
  };
  const kind = el("select", { id: "bp-kind" }, ...Object.keys(choices).map((k) => el("option", { value: k, text: k })));
  const value = el("input", { id: "bp-value", type: "text", list: "bp-choices", placeholder: "name" });
  const options = el("datalist", { id: "bp-choices" });
  const offer = () => options.replaceChildren(...choices[kind.value].map((c) => el("option", { value: c })));
  kind.onchange = offer;
  offer();
  const add = el("form", { class: "add-breakpoint", onsubmit: (event) => {
    event.preventDefault();
    if (!value.value.trim()) return;
    post("breakpoints", { breakpoints: [...points, { [kind.value]: value.value.trim() }] });
  } }, kind, value, options, el("button", { type: "submit", text: "Add breakpoint" }));
  const held = status.held
    ? el("div", { class: "held" },
      el("p", { class: "held-at", text: `Held at ${status.held}` }),
      el("div", { class: "buttons" },
        el("button", { class: "step", text: "Step", onclick: () => post("step", {}) }),
        el("button", { class: "continue", text: "Continue", onclick: () => post("continue", {}) })))
    : null;
  return el("section", { class: "holding" }, el("h3", { text: "Breakpoints" }), held, list, add);
}

function questionForm(call, question, pause) {
  const schema = question.schema || {};
  const required = new Set(schema.required || []);
  const fields = [];
  const inputs = {};
  for (const [name, field] of Object.entries(schema.properties || {})) {
    let input;
    if (Array.isArray(field.enum)) {
      input = el("select", { name }, ...field.enum.map((option) => el("option", { value: String(option), text: String(option) })));
    } else if (field.type === "boolean") {
      input = el("input", { type: "checkbox", name });
    } else {
      input = el("input", { type: field.type === "integer" || field.type === "number" ? "number" : "text", name });
    }
    inputs[name] = [input, field];
    fields.push(el("label", {}, el("span", { text: `${field.title || name}${required.has(name) ? " *" : ""}` }), input));
  }
  const content = () => {
    const given = {};
    for (const [name, [input, field]] of Object.entries(inputs)) {
      if (field.type === "boolean") given[name] = input.checked;
      else if (input.value === "") continue;
      else if (field.type === "integer") given[name] = parseInt(input.value, 10);
      else if (field.type === "number") given[name] = Number(input.value);
      else given[name] = input.value;
    }
    return given;
  };
  const send = (action) => post("answer", { call_id: call.id, question: question.key, pause, action,
    ...(action === "accept" ? { content: question.url ? null : content() } : {}) });
  return el("form", { class: "question", "data-call": call.id, onsubmit: (event) => { event.preventDefault(); send("accept"); } },
    el("div", { class: "call", text: `${call.name} · ${call.id} asks:` }),
    el("p", { text: question.message }),
    question.url ? el("p", { class: "note", text: `Open ${question.url}, then accept.` }) : null,
    ...fields,
    el("div", { class: "buttons" },
      el("button", { type: "submit", class: "accept", text: "Answer" }),
      el("button", { type: "button", class: "decline", text: "Decline", onclick: () => send("decline") }),
      el("button", { type: "button", class: "dismiss", text: "Cancel", onclick: () => send("cancel") })));
}

async function loadPage() {
  const shown = run;
  const offset = shown.transitions.length;
  if (offset >= shown.summary.count || shown.loading) return;
  shown.loading = true;
  try {
    const page = await getJSON(query("/api/run/transitions", { key: shown.key, offset, limit: PAGE }));
    const list = document.getElementById("transitions");
    if (run !== shown || !list) return; // the page moved on meanwhile
    for (const t of page.transitions) {
      if (t.index !== shown.transitions.length) continue; // one an event brought meanwhile
      shown.transitions.push(t);
      list.append(timelineItem(t));
    }
  } finally {
    shown.loading = false;
  }
}

function timelineItem(t) {
  const item = el("li", { "data-index": String(t.index), onclick: () => select(t.index) },
    el("span", { class: "n", text: `#${t.index}` }),
    t.trigger ? el("span", { class: "trigger", text: t.trigger }) : el("span", { class: "note", text: "(state)" }),
    " ",
    el("span", { text: t.source ? `${t.source} → ${t.dest}` : t.dest }),
    guardChips(t.guards),
    t.stop_reason ? el("span", { class: "note", text: ` / ${t.stop_reason}` }) : null);
  return item;
}

function guardChips(guards) {
  if (!guards.length) return null;
  return el("span", { class: "guards" },
    ...guards.map((g) => el("span", { class: `guard ${g.held ? "held" : "failed"}`, text: g.name,
      title: g.held ? "held: this edge was taken" : "did not hold" })));
}

async function step(by) {
  if (run && run.selected !== null) {
    run.following = false;
    await select(run.selected + by);
  }
}

async function select(index) {
  const count = run.summary.count;
  if (!count || index < 0 || index >= count) return;
  while (run.transitions.length <= index) {
    const before = run.transitions.length;
    await loadPage();
    if (run.transitions.length === before) return;
  }
  if (!document.getElementById("slider")) return; // the page moved on to another view meanwhile
  run.selected = index;
  history.replaceState(null, "", `#/run/${encodeURIComponent(run.key)}/${index}`);
  document.getElementById("slider").value = String(index);
  document.getElementById("position").textContent = `transition ${index + 1} of ${count}`;
  for (const item of document.querySelectorAll("#transitions li.selected")) item.classList.remove("selected");
  const item = document.querySelector(`#transitions li[data-index="${index}"]`);
  if (item) {
    item.classList.add("selected");
    const box = item.closest(".timeline"); // scrolled within the timeline, never the page
    const top = item.offsetTop;
    if (top < box.scrollTop || top + item.offsetHeight > box.scrollTop + box.clientHeight) {
      box.scrollTop = top - box.clientHeight / 2;
    }
  }
  const t = run.transitions[index];
  markDiagram(index, t);
  showDetail(t);
  const asked = ++run.asked;
  try {
    const memory = await getJSON(query("/api/run/memory", { key: run.key, at: index }));
    if (asked === run.asked) showMemory(memory);
  } catch (error) {
    if (asked === run.asked) document.getElementById("memory").replaceChildren(el("p", { class: "problem", text: error.message }));
  }
}

function markDiagram(index, t) {
  const svg = document.querySelector("svg.machine");
  const states = run.summary.states;
  const visited = new Set(states.slice(0, index + 1));
  const groups = {};
  for (const state of run.summary.table.states) if (state.group) groups[state.name] = state.group;
  for (const node of svg.querySelectorAll(".state, .group")) {
    const name = node.dataset.state;
    node.classList.toggle("current", name === t.dest || name === groups[t.dest]);
    node.classList.toggle("visited", visited.has(name));
  }
  for (const node of svg.querySelectorAll(".selected")) node.classList.remove("selected");
  if (t.edge !== null) {
    for (const path of svg.querySelectorAll("path.edge[data-edges]")) {
      if (path.dataset.edges.split(" ").includes(String(t.edge))) path.classList.add("selected");
    }
    const label = svg.querySelector(`.edge-label[data-edge="${t.edge}"]`);
    if (label) label.classList.add("selected");
  }
}

function showDetail(t) {
  const facts = [["step", t.step], ["trigger", t.trigger], ["from", t.source], ["to", t.dest],
    ["stop reason", t.stop_reason], ["error", t.error],
    ["time in the state before", t.duration_s == null ? null : `${(t.duration_s * 1000).toFixed(2)} ms`]];
  const list = el("dl", {});
  for (const [name, value] of facts) {
    if (value === null || value === undefined) continue;
    list.append(el("dt", { text: name }), el("dd", { text: String(value) }));
  }
  const guards = t.guards.length
    ? el("ol", { class: "guard-list" }, ...t.guards.map((g) =>
      el("li", { class: g.held ? "held" : "failed", text: `${g.name}: ${g.held ? "held (taken)" : "did not hold"}` })))
    : el("p", { class: "note", text: t.trigger ? "No guard: the edge's only way, or its fallback." : "" });
  const result = run.summary.result;
  const ending = result && t.index === run.summary.count - 1
    ? el("div", { class: "message role-result" }, el("div", { class: "role", text: "result" }),
      el("pre", { text: [result.output, result.error].filter(Boolean).join("\n") || "(no output)" }))
    : null;
  const state = run.summary.table.states.find((spec) => spec.name === t.dest);
  const forkable = run.summary.fork && state && state.role !== "final";
  const fork = forkable
    ? el("button", { class: "fork", text: "Fork from here…", title: "a new run from this transition, its memory edited",
      onclick: () => openFork(run.summary.fork.at ?? t.index) }) // a checkpoint: its last state
    : null;
  document.getElementById("detail").replaceChildren(...[
    el("h2", { text: `Transition #${t.index}` }), list, fork, el("div", { id: "fork" }),
    el("h2", { text: "Guards, in the order evaluated" }), guards,
    ending,
    el("h2", { text: "Memory at this transition" }),
    el("div", { class: "messages", id: "memory" }, el("p", { class: "note", text: "Loading…" })),
  ].filter(Boolean));
}

async function openFork(at) {
  // the memory as the run's checkpoint holds it after transition `at` (a flow's: each of its
  // agents'), each message editable or dropped; the fork starts from there as a new run, and the
  // page goes to it
  const box = document.getElementById("fork");
  let point;
  try {
    point = await getJSON(query("/api/run/fork", { key: run.key, at }));
  } catch (error) {
    box.replaceChildren(el("p", { class: "problem", text: error.message }));
    return;
  }
  const flow = point.agents ? Object.entries(point.agents) : null; // a flow has no memory of its own
  const memories = (flow || [[null, point.messages]]).map(([name, messages]) => ({ name, rows: editable(messages) }));
  const said = el("p", { class: "note", id: "forked" });
  const agents = run.summary.fork.agents; // a file's fork runs by a factory of the app's, chosen here
  const agent = agents ? el("select", { class: "fork-agent" }, ...agents.map((name) => el("option", { value: name, text: name }))) : null;
  const start = el("button", { class: "start-fork", text: "Start the fork", onclick: async () => {
    const memory = flow
      ? { agents: Object.fromEntries(memories.map(({ name, rows }) => [name, kept(rows)])) }
      : { messages: kept(memories[0].rows) };
    const response = await fetch("/api/run/fork", {
      method: "POST", credentials: "same-origin", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ key: run.key, at, ...memory, ...(agent ? { agent: agent.value } : {}) }),
    });
    const answer = await response.json().catch(() => ({ problem: `HTTP ${response.status}` }));
    if (!response.ok) { said.className = "problem"; said.textContent = answer.problem; return; }
    location.hash = `#/run/${encodeURIComponent(answer.key)}`;
  } });
  box.replaceChildren(el("section", { class: "fork-editor" },
    el("h2", { text: `Fork from transition #${at} (${point.state}, step ${point.step})` }),
    el("p", { class: "note", text: "Edit or drop messages; a dropped tool result takes its call with it. The fork is a new run with its own trace." }),
    ...memories.map(({ name, rows }) => el("div", { class: "messages", ...(name ? { "data-agent": name } : {}) },
      ...(name ? [el("h3", { text: `agent ${name}` })] : []), ...rows.map((row) => row.node))),
    el("div", { class: "buttons" }, agent ? el("label", {}, "run by ", agent) : null, start,
      el("button", { text: "Close", onclick: () => box.replaceChildren() })), said));
}

function editable(messages) {
  // each message of a memory to fork from: its text in a box, and whether it is dropped
  return messages.map((m, i) => {
    const content = el("textarea", { class: "content", rows: "2", "data-index": String(i) });
    content.value = m.content == null ? "" : typeof m.content === "string" ? m.content : JSON.stringify(m.content);
    const drop = el("input", { type: "checkbox", class: "drop", "data-index": String(i) });
    return { m, content, drop, node: el("div", { class: `message role-${m.role}` },
      el("div", { class: "role" }, `${m.role}${m.name ? ` · ${m.name}` : ""}${m.tool_call_id ? ` · ${m.tool_call_id}` : ""} `,
        el("label", { class: "drop-label" }, drop, " drop")),
      content,
      ...(m.tool_calls || []).map((call) => el("div", { class: "call", text: `${call.name}(${call.arguments}) · ${call.id}` }))) };
  });
}

function kept(rows) {
  // the messages not dropped, as edited
  return rows.filter((row) => !row.drop.checked).map((row) => {
    const text = row.content.value;
    if (row.m.content == null) return { ...row.m, content: text === "" ? null : text }; // left empty: none
    return { ...row.m, content: typeof row.m.content === "string" ? text : row.m.content };
  });
}

function showMemory(memory) {
  const shown = [...memory.system.map((m) => ({ ...m, role: "system" })), ...memory.messages];
  const nodes = shown.map((m) => {
    const box = el("div", { class: `message role-${m.role}` },
      el("div", { class: "role", text: m.role + (m.name ? ` · ${m.name}` : "") + (m.tool_call_id ? ` · ${m.tool_call_id}` : "") }));
    if (m.content) box.append(el("pre", { text: typeof m.content === "string" ? m.content : JSON.stringify(m.content, null, 1) }));
    for (const call of m.tool_calls || []) {
      box.append(el("div", { class: "call", text: `${call.name}(${call.arguments}) · ${call.id}` }));
    }
    if (m.base64_image && /^[A-Za-z0-9+/=\s]+$/.test(m.base64_image)) {
      box.append(el("img", { alt: "image", src: `data:image/png;base64,${m.base64_image}` }));
    }
    return box;
  });
  document.getElementById("memory").replaceChildren(...(nodes.length ? nodes : [el("p", { class: "note", text: "(empty)" })]));
}

document.addEventListener("keydown", (event) => {
  if (!run || event.target.matches("input:not([type=range]), textarea")) return;
  if (event.target.matches("input[type=range]")) return; // the slider steps by itself
  if (event.target.closest && event.target.closest("#steering")) return; // typing a decision or an answer
  if (event.key === "ArrowLeft") { step(-1); event.preventDefault(); }
  else if (event.key === "ArrowRight") { step(1); event.preventDefault(); }
  else if (event.key === "Home") { run.following = false; select(0); event.preventDefault(); }
  else if (event.key === "End") { run.following = true; select(run.summary.count - 1); event.preventDefault(); }
});
window.addEventListener("hashchange", route);
route();
