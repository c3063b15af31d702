// The page that watches a run: POST the task, read the run's AG-UI events over
// server-sent events, draw tokens, tool calls and results as they arrive, and answer
// approvals with a POST. Model and tool text is untrusted: it only ever goes into
// textContent, never into HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const base = location.pathname.replace(/[^/]*$/, "");  // where the app is mounted
let source = null;
let runId = null;
let stack = [];            // open steps, innermost last (a child agent's steps nest)
const messages = new Map(); // message id -> <pre>
const calls = new Map();    // tool call id -> {el, args}
const asks = new Map();     // approval key -> element

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

function state(name, text) {
  $("state").dataset.state = name;
  $("state").textContent = text || name;
}

function currentStep() {
  if (stack.length) return stack[stack.length - 1];
  return startStep("step", null);  // an event outside any step still shows
}

function startStep(name, agent) {
  const box = el("div", "step");
  box.dataset.step = name;
  const label = el("div", "label");
  label.append(el("span", "kind", "…"), " " + (agent ? agent + " · " : "") + name.replace(/^.*:/, ""));
  box.append(label);
  $("steps").append(box);
  stack.push(box);
  return box;
}

function handle(ev) {
  const agent = ev.metadata && ev.metadata.agent;
  switch (ev.type) {
    case "RUN_STARTED":
      state("running");
      $("run-id").textContent = ev.runId;
      break;
    case "STEP_STARTED":
      startStep(ev.stepName, agent);
      break;
    case "STEP_FINISHED": {
      const i = stack.findIndex((box) => box.dataset.step === ev.stepName);
      if (i >= 0) stack.splice(i, 1);
      break;
    }
    case "TEXT_MESSAGE_START": {
      const pre = el("pre", "text");
      pre.dataset.message = ev.messageId;
      messages.set(ev.messageId, pre);
      currentStep().append(pre);
      break;
    }
    case "TEXT_MESSAGE_CONTENT": {
      const pre = messages.get(ev.messageId);
      if (pre) pre.textContent += ev.delta;
      document.body.dataset.deltas = String(Number(document.body.dataset.deltas || 0) + 1);
      break;
    }
    case "TOOL_CALL_START": {
      const box = el("div", "call");
      box.dataset.call = ev.toolCallId;
      const args = el("pre", "args", "");
      box.append(el("span", "name", ev.toolCallName), args);
      calls.set(ev.toolCallId, { el: box, args });
      currentStep().append(box);
      break;
    }
    case "TOOL_CALL_ARGS": {
      const call = calls.get(ev.toolCallId);
      if (call) call.args.textContent += ev.delta;
      break;
    }
    case "TOOL_CALL_RESULT": {
      const call = calls.get(ev.toolCallId);
      const text = typeof ev.content === "string" ? ev.content : JSON.stringify(ev.content);
      const out = el("pre", "result" + (/^ERROR\[/.test(text) ? " error" : ""), "→ " + text);
      (call ? call.el : currentStep()).append(out);
      break;
    }
    case "CUSTOM":
      custom(ev.name, ev.value, agent);
      break;
    case "RUN_FINISHED": {
      const r = ev.result || {};
      state("finished", "stopped: " + (r.stopped_reason || "?"));
      const answer = $("answer");
      answer.hidden = false;
      answer.className = r.answer == null ? "none" : "";
      answer.textContent = r.answer == null ? "no answer" : r.answer;
      done();
      break;
    }
    case "RUN_ERROR":
      state("error", "error");
      $("answer").hidden = false;
      $("answer").className = "none";
      $("answer").textContent = ev.message;
      done();
      break;
  }
}

function custom(name, value, agent) {
  if (name === "step") {
    const box = currentStep();  // the recorded Step comes inside its own step, before STEP_FINISHED
    box.querySelector(".kind").textContent = value.kind;
    if (value.kind === "final" && !box.querySelector("pre.text") && value.raw) {
      box.append(el("pre", "text", value.raw));
    }
  } else if (name === "approval_requested") {
    const box = el("div", "approval");
    box.dataset.key = value.key;
    const what = (agent ? agent + ": " : "") + value.tool + "(" + JSON.stringify(value.args) + ")";
    const yes = el("button", "approve", "Approve");
    const no = el("button", "deny", "Deny");
    yes.onclick = () => answer(value.key, true);
    no.onclick = () => answer(value.key, false);
    box.append(el("span", "what", what), yes, no);
    asks.set(value.key, box);
    $("approvals").append(box);
  } else if (name === "approval_decided") {
    const box = asks.get(value.key);
    if (box) {
      box.classList.add("decided");
      box.querySelectorAll("button").forEach((b) => b.remove());
      box.append(el("span", "decision", value.approved ? "approved" : "denied: " + value.reason));
    }
  }
}

async function answer(key, approved) {
  await fetch(base + "runs/" + encodeURIComponent(runId) + "/approvals/" + encodeURIComponent(key), {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ approved }),
  });
}

function done() {
  if (source) source.close();  // else EventSource reconnects and replays the run
  source = null;
  $("start").disabled = false;
}

async function start(task) {
  $("start").disabled = true;
  for (const id of ["steps", "approvals"]) $(id).replaceChildren();
  $("answer").hidden = true;
  stack = [];
  messages.clear(); calls.clear(); asks.clear();
  $("run").hidden = false;
  state("starting");
  const response = await fetch(base + "runs", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ task }),
  });
  const body = await response.json();
  if (!response.ok) {
    state("error", body.error || "could not start");
    $("start").disabled = false;
    return;
  }
  runId = body.run_id;
  source = new EventSource(base + "runs/" + encodeURIComponent(runId) + "/events");
  source.onmessage = (message) => handle(JSON.parse(message.data));
  source.onerror = () => {  // a drop reconnects by itself (Last-Event-ID); a refusal does not
    if (source && source.readyState === EventSource.CLOSED) {
      state("error", "the stream was refused");
      done();
    }
  };
}

$("task-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const task = $("task").value.trim();
  if (task) start(task);
});

const asked = new URLSearchParams(location.search).get("task");
if (asked) {  // /?task=... starts a run on load
  $("task").value = asked;
  start(asked);
}
