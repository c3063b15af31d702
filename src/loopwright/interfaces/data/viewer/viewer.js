// Filters, expand/collapse and prompt prefixes for the trace viewer. The page works
// without it; it reads only the DOM (no trace data is embedded in script) and writes
// trace text back only through textContent.
(function () {
  "use strict";
  var steps = Array.prototype.slice.call(document.querySelectorAll("li.step"));
  var buttons = Array.prototype.slice.call(document.querySelectorAll("[data-filter]"));

  function show(filter) {
    steps.forEach(function (li) {
      var kind = li.getAttribute("data-step-kind");
      var keep = filter === "all" ||
        (filter === "issues" && (li.classList.contains("flagged") || li.classList.contains("guard"))) ||
        filter === kind;
      li.classList.toggle("hidden", !keep);
    });
    buttons.forEach(function (b) {
      b.setAttribute("aria-pressed", b.getAttribute("data-filter") === filter ? "true" : "false");
    });
  }
  buttons.forEach(function (b) {
    b.addEventListener("click", function () { show(b.getAttribute("data-filter")); });
  });

  function setOpen(open) {
    steps.forEach(function (li) {
      if (!li.classList.contains("hidden")) { li.querySelector("details").open = open; }
    });
  }
  var expand = document.getElementById("expand-all");
  var collapse = document.getElementById("collapse-all");
  if (expand) { expand.addEventListener("click", function () { setOpen(true); }); }
  if (collapse) { collapse.addEventListener("click", function () { setOpen(false); }); }

  // A prompt that extends the previous call's is written as its new part only; its
  // prefix is rebuilt from the chain of earlier prompts when it is first opened.
  function fullPrompt(index) {
    var chain = [];
    var block = document.getElementById("prompt-" + index);
    while (block) {
      chain.push(block);
      var prev = block.getAttribute("data-extends");
      block = prev ? document.getElementById("prompt-" + prev) : null;
    }
    var text = "";
    for (var k = chain.length - 1; k >= 0; k--) {
      var shared = Number(chain[k].getAttribute("data-shared") || 0);
      text = text.slice(0, shared) + chain[k].querySelector(".prompt-new").textContent;
    }
    return text;
  }
  function fillPrefix(block) {
    var pre = block.querySelector(".prompt-prefix");
    if (!pre || pre.getAttribute("data-filled")) { return; }
    var shared = Number(block.getAttribute("data-shared"));
    pre.textContent = fullPrompt(block.getAttribute("data-extends")).slice(0, shared);
    pre.setAttribute("data-filled", "true");
  }
  Array.prototype.forEach.call(document.querySelectorAll("details.prefix"), function (d) {
    d.addEventListener("toggle", function () {
      if (d.open) { fillPrefix(d.parentElement); }
    });
  });

  // Following a link (#step-3, #prompt-3) opens everything around its target.
  function openHash() {
    var target = location.hash && document.getElementById(location.hash.slice(1));
    if (!target) { return; }
    for (var el = target; el; el = el.parentElement) {
      if (el.tagName === "DETAILS") { el.open = true; }
    }
    if (target.tagName === "LI") { target.querySelector("details").open = true; }
    if (target.classList.contains("prompt")) {
      var prefix = target.querySelector("details.prefix");
      if (prefix) { prefix.open = true; fillPrefix(target); }
    }
  }
  window.addEventListener("hashchange", openHash);
  openHash();
})();
