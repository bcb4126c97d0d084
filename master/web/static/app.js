// detlab web pages: small progressive enhancements (the pages work without this file).
(function () {
  "use strict";

  // Times in the viewer's locale; the server writes UTC as the no-JavaScript fallback.
  function localTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      if (el.dataset.local) return;
      var d = new Date(el.getAttribute("datetime"));
      if (isNaN(d.getTime())) return;
      el.title = d.toISOString();
      el.textContent = el.closest("pre.logs") ? d.toLocaleTimeString() : d.toLocaleString();
      el.dataset.local = "1";
    });
  }
  window.detlabLocalTimes = localTimes;

  function wire(root) {
    localTimes(root);
    root.querySelectorAll("input.select-all").forEach(function (box) {
      if (box.dataset.wired) return;
      box.dataset.wired = "1";
      box.addEventListener("change", function () {
        var table = box.closest("table");
        table.querySelectorAll('tbody input[type="checkbox"]').forEach(function (b) {
          b.checked = box.checked;
        });
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    wire(document);
    // A kill cannot be undone: ask first (without JavaScript the button acts at once).
    document.addEventListener("click", function (ev) {
      var btn = ev.target.closest('button[data-action="kill"], button[value="kill"]');
      var ask = btn && (btn.dataset.confirm || "Kill now? Running trials stop without a checkpoint.");
      if (btn && !window.confirm(ask)) {
        ev.preventDefault();
      }
    });
  });

  // Live regions (htmx polling): skip a refresh while the user has rows selected or is typing
  // in it, and stop refreshing an experiment that has ended.
  document.addEventListener("htmx:beforeRequest", function (ev) {
    var elt = ev.detail.elt;
    if (!elt || !elt.hasAttribute("hx-trigger")) return;
    if (elt.dataset.terminal === "yes" || elt.querySelector('[data-ended="yes"]')) { ev.preventDefault(); return; }
    if (elt.dataset.live === "selection" && elt.querySelector('input[type="checkbox"]:checked')) {
      ev.preventDefault(); return;
    }
    if (elt.contains(document.activeElement) && document.activeElement !== document.body &&
        /^(INPUT|SELECT|TEXTAREA)$/.test(document.activeElement.tagName)) {
      ev.preventDefault();
    }
  });
  document.addEventListener("htmx:afterSwap", function (ev) { wire(ev.detail.target || document); });
  document.addEventListener("htmx:load", function (ev) { wire(ev.detail.elt || document); });
})();
