// memvault web view: the little that is not plain HTML. Loaded as a file (the CSP allows no inline script);
// stored text never reaches this code except as data read with textContent and drawn on a canvas.
(function () {
  "use strict";

  // -- live: poll the index's version; when it moves, live parts of the page re-fetch themselves (htmx).
  var POLL_MS = 2000;
  var version = null;
  function poll() {
    if (document.hidden) { return; }
    var url = document.body.getAttribute("data-live");
    if (!url) { return; }
    fetch(url, { credentials: "same-origin", cache: "no-store" }).then(function (r) {
      return r.ok ? r.json() : null;
    }).then(function (data) {
      var state = document.getElementById("live-state");
      if (!data || !data.version) { if (state) { state.textContent = "live: paused"; } return; }
      if (state) { state.textContent = "live"; }
      if (version !== null && data.version !== version && window.htmx) {
        window.htmx.trigger(document.body, "memvault:changed");
      }
      version = data.version;
      var count = document.getElementById("inbox-count");
      if (count) { count.textContent = String(data.inbox); }
    }).catch(function () {
      var state = document.getElementById("live-state");
      if (state) { state.textContent = "live: server unreachable"; }
    });
  }

  // -- "all" ticks every checkbox of a name (the inbox).
  function selectAll() {
    document.querySelectorAll("input[data-select-all]").forEach(function (box) {
      box.addEventListener("change", function () {
        var name = box.getAttribute("data-select-all");
        box.form.querySelectorAll("input[type=checkbox][name='" + name + "']").forEach(function (other) {
          other.checked = box.checked;
        });
      });
    });
  }

  // -- plots (uPlot). Series come from a JSON block of the page (type application/json: data, never run).
  function days(list) {
    return list.map(function (d) { return Date.parse(d + "T00:00:00Z") / 1000; });
  }
  function times(list) {
    return list.map(function (t) { return Date.parse(t) / 1000; });
  }
  var BUILD = {
    growth: function (s) {
      var g = s.growth;
      return { data: [days(g.days), g.facts, g.procedures],
               series: [{}, { label: "facts", stroke: "#2454c5", width: 2 }, { label: "procedures", stroke: "#1f7a3a", width: 2 }] };
    },
    episodes: function (s) {
      var e = s.episodes;
      return { data: [days(e.days), e.count],
               series: [{}, { label: "episodes", stroke: "#8a5a00", fill: "rgba(138,90,0,0.15)", width: 1 }] };
    },
    recalls: function (s) {
      var r = s.recalls;
      return { data: [days(r.days), r.count, r.median_ms],
               series: [{}, { label: "recalls", stroke: "#2454c5", width: 2, scale: "n" },
                        { label: "median ms", stroke: "#b3261e", width: 2, scale: "ms" }],
               axes: [{}, { scale: "n" }, { scale: "ms", side: 1, grid: { show: false } }] };
    },
    runs: function (s) {
      var r = s.runs;
      return { data: [times(r.at), r.seconds],
               series: [{}, { label: "seconds", stroke: "#6639ba", width: 0, points: { show: true, size: 7, fill: "#6639ba" } }] };
    }
  };
  function plots() {
    if (!window.uPlot) { return; }
    document.querySelectorAll("div.plot[data-plot]").forEach(function (el) {
      var source = document.getElementById(el.getAttribute("data-series"));
      var build = BUILD[el.getAttribute("data-plot")];
      if (!source || !build) { return; }
      var spec = build(JSON.parse(source.textContent));
      if (!spec.data[0].length) {
        el.textContent = "nothing to plot yet";
        el.classList.add("muted");
        return;
      }
      var options = { width: Math.max(300, el.clientWidth - 10), height: 220, series: spec.series,
                      scales: { x: { time: true } } };
      if (spec.axes) { options.axes = spec.axes; }
      new window.uPlot(options, spec.data, el);
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    selectAll();
    plots();
    poll();
    window.setInterval(poll, POLL_MS);
  });
})();
