// Filters and expand/collapse for the trace viewer. The page works without it; it reads
// only the DOM (no trace data is embedded in script).
(function () {
  "use strict";
  var steps = Array.prototype.slice.call(document.querySelectorAll("li.step"));
  var buttons = Array.prototype.slice.call(document.querySelectorAll("[data-filter]"));
  function show(filter) {
    steps.forEach(function (li) {
      var kind = li.getAttribute("data-step-kind");
      var keep = filter === "all" ||
        (filter === "issues" && (li.classList.contains("flagged") || li.classList.contains("guard"))) ||
        (filter === "model" && li.hasAttribute("data-model-call")) ||
        (filter === "tools" && li.hasAttribute("data-tool")) ||
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
  // Following a chart link opens the step it points at.
  function openHash() {
    var target = location.hash && document.getElementById(location.hash.slice(1));
    if (target && target.tagName === "LI") { target.querySelector("details").open = true; }
  }
  window.addEventListener("hashchange", openHash);
  openHash();
})();
