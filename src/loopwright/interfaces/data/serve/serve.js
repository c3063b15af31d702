// The page that watches a run: POST the task, read the run's AG-UI events over
// server-sent events, draw tokens, tool calls and results as they arrive, and answer
// approvals with a POST. Model and tool text is untrusted: it only ever goes into
// textContent, never into HTML. A task in the address (?task=...) is only filled in: a
// link from anywhere can carry one, so the person reads it and presses Run. ?run=ID
// opens a run the server holds.
"use strict";

const $ = (id) => document.getElementById(id);
const base = location.pathname.replace(/[^/]*$/, "");  // where the app is mounted
let reading = null;         // the AbortController of the stream being read
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

// -- talking to the server: the token (when the server has one) goes as a bearer header

function token() {
  return sessionStorage.getItem("loopwright-token") || "";
}

function headers(extra) {
  const out = Object.assign({}, extra || {});
  if (token()) out.Authorization = "Bearer " + token();
  return out;
}

async function api(path, options) {
  const init = Object.assign({}, options || {});
  init.headers = headers(init.headers);
  const response = await fetch(base + path, init);
  if (response.status === 401) $("token-form").hidden = false;
  return response;
}

async function post(path, body) {
  return api(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
}

// -- drawing the run

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
      const reason = r.stopped_reason || "?";
      // only an answer is a success: a run cut off by a limit or a denial is not
      state(reason === "final" ? "answered" : "stopped", reason === "final" ? "answered" : "stopped: " + reason);
      const answer = $("answer");
      answer.hidden = false;
      answer.className = r.answer == null ? "none" : "";
      answer.textContent = r.answer == null ? "no answer (stopped: " + reason + ")" : r.answer;
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
    asks.set(value.key, approvalBox(value, agent));
    $("approvals").append(asks.get(value.key));
  } else if (name === "approval_decided") {
    const box = asks.get(value.key);
    if (box) {
      box.classList.add("decided");
      box.querySelectorAll("button").forEach((b) => b.remove());
      box.append(el("span", "decision", value.approved ? "approved" : "denied: " + value.reason));
    }
  }
}

function approvalBox(value, agent) {
  // what is asked: the tool, what it does to the world, what it says it does, the exact call
  const box = el("div", "approval");
  box.dataset.key = value.key;
  const head = el("div", "what");
  head.append(el("span", "tool", (agent ? agent + ": " : "") + value.tool));
  const effects = value.side_effects || "none";
  head.append(" ", el("span", "effects effects-" + effects.replace(/[^a-z]/g, ""), effects));
  box.append(head);
  if (value.description) box.append(el("div", "description", value.description));
  box.append(el("pre", "call-args", JSON.stringify(value.args, null, 1)));
  const yes = el("button", "approve", "Approve");
  const no = el("button", "deny", "Deny");
  yes.onclick = () => answer(value.key, true);
  no.onclick = () => answer(value.key, false);
  const buttons = el("div", "buttons");
  buttons.append(yes, no);
  box.append(buttons);
  return box;
}

async function answer(key, approved) {
  await post("runs/" + encodeURIComponent(runId) + "/approvals/" + encodeURIComponent(key), { approved });
}

function done() {
  if (reading) reading.abort();
  reading = null;
  $("start").disabled = false;
  listRuns();
}

// -- reading the stream: fetch (it can carry the token), resumed after a drop from the last event

async function read(id, controller) {
  let last = null;
  for (let tries = 0; tries < 20 && reading === controller; tries++) {
    try {
      const extra = last === null ? {} : { "Last-Event-ID": last };
      const response = await api("runs/" + encodeURIComponent(id) + "/events",
        { headers: extra, signal: controller.signal });
      if (!response.ok) {
        state("error", response.status === 404 ? "no such run here" : "the stream was refused");
        done();
        return;
      }
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done: ended } = await reader.read();
        if (ended) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const frame = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          let data = "";
          for (const line of frame.split("\n")) {
            if (line.startsWith("id: ")) last = line.slice(4);
            else if (line.startsWith("data: ")) data += line.slice(6);
          }
          if (data) handle(JSON.parse(data));
          if (reading !== controller) return;
        }
      }
      if (reading !== controller) return;
    } catch (err) {
      if (reading !== controller) return;  // stopped on purpose
    }
    await new Promise((resume) => setTimeout(resume, 1000));  // the connection dropped: resume
  }
}

function reset() {
  if (reading) reading.abort();
  reading = null;
  for (const id of ["steps", "approvals"]) $(id).replaceChildren();
  $("answer").hidden = true;
  stack = [];
  messages.clear(); calls.clear(); asks.clear();
  $("run").hidden = false;
}

function open(id) {
  reset();
  runId = id;
  $("run-id").textContent = id;
  history.replaceState(null, "", base + "?run=" + encodeURIComponent(id));
  state("opening");
  reading = new AbortController();
  read(id, reading);
}

async function start(task) {
  $("start").disabled = true;
  $("from-link").hidden = true;
  reset();
  state("starting");
  const response = await post("runs", { task });
  let body = {};
  try { body = await response.json(); } catch (err) { /* not JSON: the status says enough */ }
  if (!response.ok) {
    state("error", body.error || "could not start (" + response.status + ")");
    $("start").disabled = false;
    return;
  }
  open(body.run_id);  // done() enables Run again when the run ends
}

// -- the runs the server holds

async function listRuns() {
  const response = await api("runs");
  if (!response.ok) return;
  const body = await response.json();
  const list = $("runs-list");
  list.replaceChildren();
  for (const run of body.runs) {
    const item = el("li");
    const link = el("a", "", run.task.length > 80 ? run.task.slice(0, 80) + "…" : run.task);
    link.href = base + "?run=" + encodeURIComponent(run.run_id);
    item.dataset.run = run.run_id;
    item.append(link, " ", el("span", "run-state", run.stopped_reason ? run.state + ": " + run.stopped_reason : run.state));
    list.append(item);
  }
  $("runs").hidden = body.runs.length === 0;
}

$("task-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const task = $("task").value.trim();
  if (task) start(task);
});

$("token-form").addEventListener("submit", (e) => {
  e.preventDefault();
  sessionStorage.setItem("loopwright-token", $("token").value.trim());
  location.reload();
});

(function init() {
  const given = new URLSearchParams(location.hash.slice(1)).get("token");
  if (given) {  // an address with #token=...: kept for this tab, taken out of the address bar
    sessionStorage.setItem("loopwright-token", given);
    history.replaceState(null, "", location.pathname + location.search);
  }
  const query = new URLSearchParams(location.search);
  const run = query.get("run");
  const asked = query.get("task");
  if (run) {
    open(run);
  } else if (asked) {  // filled in, not started: the person reads it and presses Run
    $("task").value = asked;
    $("from-link").hidden = false;
    $("start").focus();
  }
  listRuns();
  document.body.dataset.ready = "1";
})();
