// memvault web view: the little that is not plain HTML. Loaded as a file (the CSP allows no inline script);
// stored text never reaches this code. Charts are SVG drawn on the server (charts.py), not here.
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

  document.addEventListener("DOMContentLoaded", function () {
    selectAll();
    poll();
    window.setInterval(poll, POLL_MS);
  });
})();
