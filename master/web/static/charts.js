// Charts (uPlot, installed from npm): a trial's metric, an experiment's learning curves,
// hyperparameter scatters, and compared trials. Data comes from the master's downsampled series.
(function () {
  "use strict";
  var PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777",
    "#65a30d", "#ea580c", "#4f46e5", "#0d9488", "#9333ea"];
  var POLL_MS = 5000;

  function color(i) { return PALETTE[i % PALETTE.length]; }

  function getJSON(url) {
    return fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) {
        if (!r.ok) throw new Error(url + ": HTTP " + r.status);
        return r.json();
      });
  }

  function picked(form) {
    var v = (form.querySelector('select[name="metric"]') || {}).value || "";
    var i = v.indexOf(":");
    return i < 0 ? null : { group: v.slice(0, i), name: v.slice(i + 1) };
  }

  function logY(form) { var b = form.querySelector('input[name="logy"]'); return !!(b && b.checked); }

  function positiveOnly(data) {
    return data.map(function (col, i) {
      if (i === 0) return col;
      return col.map(function (v) { return v != null && v > 0 ? v : null; });
    });
  }

  // One chart per container; rebuilt when the series set or the scale type changes.
  function Plot(el) { this.el = el; this.u = null; this.key = ""; }
  Plot.prototype.draw = function (labels, data, log, xLabel) {
    if (!window.uPlot) { this.el.textContent = "Chart library not installed (scripts/install)."; return; }
    if (log) data = positiveOnly(data);
    var key = labels.join("|") + (log ? ":log" : "");
    this.el.dataset.seriesPoints = data.slice(1).map(function (col) {
      return col.filter(function (v) { return v != null; }).length;
    }).join(",");
    if (this.u && key === this.key) { this.u.setData(data); return; }
    if (this.u) this.u.destroy();
    this.el.textContent = "";
    this.key = key;
    var series = [{ label: xLabel || "batches" }];
    labels.forEach(function (l, i) {
      series.push({ label: l, stroke: color(i), width: 1.5, spanGaps: true });
    });
    var opts = {
      width: Math.max(280, this.el.clientWidth || 600),
      height: 300,
      series: series,
      scales: { x: { time: false }, y: log ? { distr: 3 } : {} },
      axes: [{ label: xLabel || "batches" }, {}],
      legend: { live: true },
    };
    this.u = new window.uPlot(opts, data, this.el);
    var u = this.u, el = this.el;
    window.addEventListener("resize", function () { u.setSize({ width: Math.max(280, el.clientWidth), height: 300 }); });
  };

  function aligned(list) {
    // list: [{steps, values}] -> uPlot's aligned data (union of x, null where absent)
    if (!list.length) return [[]];
    return window.uPlot.join(list.map(function (s) { return [s.steps, s.values]; }));
  }

  function note(form, text) { var n = form.querySelector(".chart-note"); if (n) n.textContent = text; }

  function poller(form, load) {
    var timer = null;
    function run() {
      clearTimeout(timer);
      load().catch(function (e) { note(form, String(e.message || e)); }).then(function (again) {
        if (again) timer = setTimeout(run, POLL_MS);
      });
    }
    form.addEventListener("change", run);
    form.addEventListener("submit", function (ev) { ev.preventDefault(); run(); });
    run();
  }

  function trialChart(form) {
    var plot = new Plot(document.getElementById("trial-chart"));
    poller(form, function () {
      var p = picked(form);
      if (!p) { plot.el.textContent = "No metrics reported yet."; return Promise.resolve(form.dataset.live === "yes"); }
      var url = form.dataset.url + "?group=" + encodeURIComponent(p.group) + "&names=" + encodeURIComponent(p.name) + "&max_points=1000";
      var key = p.group + ":" + p.name + (logY(form) ? ":log" : "");
      function last(d) {
        var s = d.series[p.name];
        return s && s.steps.length ? s.steps[s.steps.length - 1] : -1;
      }
      function show(d) {
        var s = d.series[p.name] || { steps: [], values: [] };
        plot.draw([p.group + " " + p.name], [s.steps, s.values], logY(form));
        plot.el.dataset.points = String(s.steps.length);
        plot.el.dataset.reduction = d.reduction || "";
        plot.el.dataset.lastStep = String(last(d));
        var how = { all: "", minmax: " (min/max per bucket)", sampled: " (sampled; loading min/max…)" }[d.reduction] || "";
        note(form, s.steps.length + " points" + how);
      }
      return getJSON(url).then(function (d) {
        // Once the exact envelope is drawn, a sample replaces it only when it has newer steps.
        var keep = d.reduction === "sampled" && form.dataset.exactFor === key &&
          last(d) <= Number(plot.el.dataset.lastStep || -1);
        if (!keep) show(d);
        if (d.reduction === "sampled" && form.dataset.exactFor !== key) {
          form.dataset.exactFor = key;
          getJSON(url + "&exact=1").then(function (e) { if (form.dataset.exactFor === key) show(e); })
            .catch(function (e) { note(form, String(e.message || e)); });
        }
        var ended = ["COMPLETED", "CANCELED", "ERROR"].indexOf(d.state) >= 0;
        return form.dataset.live === "yes" && !ended;
      });
    });
  }

  function curvesChart(form) {
    var plot = new Plot(document.getElementById("curves-chart"));
    poller(form, function () {
      var p = picked(form);
      if (!p) { plot.el.textContent = "No metrics reported yet."; return Promise.resolve(true); }
      var url = form.dataset.url + "?group=" + encodeURIComponent(p.group) + "&metric=" + encodeURIComponent(p.name);
      return getJSON(url).then(function (d) {
        var ids = Object.keys(d.trials);
        if (!ids.length) { plot.el.textContent = "No " + p.group + " " + p.name + " values yet."; plot.u = null; return true; }
        plot.draw(ids.map(function (id) { return "trial " + id; }),
          aligned(ids.map(function (id) { return d.trials[id]; })), logY(form));
        plot.el.dataset.points = String(ids.length);
        var live = document.querySelector('#exp-live [data-ended="no"]');
        return !!live;
      });
    });
  }

  function compareChart(form) {
    var plot = new Plot(document.getElementById("compare-chart"));
    var ids = form.dataset.trials.split(",").filter(Boolean);
    poller(form, function () {
      var p = picked(form);
      if (!p) { plot.el.textContent = "These trials reported no metrics."; return Promise.resolve(false); }
      return Promise.all(ids.map(function (id) {
        var url = form.dataset.urlTemplate.replace("/0/", "/" + id + "/") + "?group=" + encodeURIComponent(p.group) + "&names=" + encodeURIComponent(p.name) + "&max_points=1000";
        return getJSON(url);
      })).then(function (all) {
        var series = all.map(function (d) { return d.series[p.name] || { steps: [], values: [] }; });
        plot.draw(ids.map(function (id) { return "trial " + id; }), aligned(series), logY(form));
        plot.el.dataset.points = String(series.length);
        return all.some(function (d) { return ["COMPLETED", "CANCELED", "ERROR"].indexOf(d.state) < 0; });
      });
    });
  }

  // One small scatter per hyperparameter the master lists in `axes` (constants left out):
  // value (x) against the searcher metric (y); a log-sampled one on a log x axis.
  function scatters() {
    var holder = document.getElementById("scatters");
    var src = document.getElementById("scatter-data");
    if (!holder || !src || !window.uPlot) return;
    var data = JSON.parse(src.textContent);
    var trials = data.trials.filter(function (t) { return typeof t.metric === "number"; });
    if (!trials.length) { holder.textContent = "No trial has a searcher metric yet."; return; }
    if (!data.axes.length) { holder.textContent = "No hyperparameter varies between the trials: nothing to plot."; return; }
    data.axes.forEach(function (axis, i) {
      var name = axis.name, cats = [], pts = [];
      trials.forEach(function (t) {
        var v = t.hparams[name];
        if (typeof v !== "number") {
          var key = String(v), idx = cats.indexOf(key);
          if (idx < 0) { cats.push(key); idx = cats.length - 1; }
          v = idx;
        }
        pts.push([v, t.metric]);
      });
      pts.sort(function (a, b) { return a[0] - b[0]; });
      var logX = axis.log && !cats.length && pts.every(function (p) { return p[0] > 0; });
      var box = document.createElement("div");
      box.className = "scatter";
      box.dataset.hparam = name;
      box.dataset.scale = logX ? "log" : "linear";
      holder.appendChild(box);
      var opts = {
        width: Math.min(360, Math.max(240, holder.clientWidth / 2 - 16)), height: 220,
        scales: { x: logX ? { time: false, distr: 3 } : { time: false } },
        series: [{ label: name }, { label: data.metric || "metric", stroke: color(i), paths: function () { return null; }, points: { show: true, size: 7, fill: color(i) } }],
        axes: [{ label: name, values: cats.length ? function (u, vals) { return vals.map(function (v) { return cats[v] !== undefined && Number.isInteger(v) ? cats[v] : ""; }); } : undefined }, {}],
        legend: { show: false },
      };
      new window.uPlot(opts, [pts.map(function (p) { return p[0]; }), pts.map(function (p) { return p[1]; })], box);
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("form.chart-controls").forEach(function (form) {
      var kind = form.dataset.chart;
      if (kind === "trial") trialChart(form);
      else if (kind === "curves") curvesChart(form);
      else if (kind === "compare") compareChart(form);
    });
    scatters();
  });
})();
