// The trial page's logs panel: follows new lines (long poll on the master), filters as you type.
(function () {
  "use strict";
  var MAX_LINES = 5000;

  function start() {
    var pre = document.getElementById("log-lines");
    if (!pre) return;
    var follow = document.getElementById("log-follow");
    var search = document.getElementById("log-search");
    var status = document.querySelector(".log-status");
    var after = parseInt(pre.dataset.after || "0", 10);
    var running = false;
    var ended = pre.dataset.live !== "yes";

    function matches(text) {
      var q = (search && search.value || "").toLowerCase();
      return !q || text.toLowerCase().indexOf(q) >= 0;
    }

    function add(lines) {
      var atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 20;
      var frag = document.createDocumentFragment();
      lines.forEach(function (l) {
        var span = document.createElement("span");
        // coloured by the level the line states (the master reads it), not by its stream
        span.className = "line stream-" + l.stream + (l.level ? " level-" + l.level : "");
        span.dataset.seq = String(l.seq);
        var t = document.createElement("time");
        t.setAttribute("datetime", l.timestamp);
        t.textContent = l.timestamp.slice(11, 19);
        span.appendChild(t);
        span.appendChild(document.createTextNode(" " + l.line + "\n"));
        if (!matches(l.line)) span.hidden = true;
        frag.appendChild(span);
      });
      pre.appendChild(frag);
      while (pre.childElementCount > MAX_LINES) pre.removeChild(pre.firstElementChild);
      var empty = document.getElementById("log-empty");
      if (empty && lines.length) empty.remove();
      if (window.detlabLocalTimes) window.detlabLocalTimes(pre);
      if (atBottom) pre.scrollTop = pre.scrollHeight;
    }

    function loop() {
      if (running || ended || !(follow && follow.checked)) return;
      running = true;
      if (status) status.textContent = "following";
      var url = pre.dataset.url + "?follow=1&timeout=20&after=" + after;
      fetch(url, { credentials: "same-origin" })
        .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); })
        .then(function (page) {
          if (page.logs.length) add(page.logs);
          after = page.last_seq;
          pre.dataset.after = String(after);
          if (page.done) { ended = true; if (status) status.textContent = "the trial has ended"; }
          running = false;
          setTimeout(loop, page.logs.length ? 0 : 200);
        })
        .catch(function (e) {
          running = false;
          if (status) status.textContent = "reconnecting (" + e.message + ")";
          setTimeout(loop, 2000);
        });
    }

    if (search) {
      search.addEventListener("input", function () {
        var n = 0;
        pre.querySelectorAll("span.line").forEach(function (s) {
          s.hidden = !matches(s.textContent);
          if (!s.hidden) n++;
        });
        if (status && search.value) status.textContent = n + " matching line" + (n === 1 ? "" : "s") + " shown";
      });
    }
    if (follow) follow.addEventListener("change", loop);
    pre.scrollTop = pre.scrollHeight;
    loop();
  }

  document.addEventListener("DOMContentLoaded", start);
})();
