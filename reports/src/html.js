"use strict";
// The page's own behaviour. The flame graph's (hover, click to zoom, search) is inferno's
// script inside the SVG; the search box below drives its functions (search, reset_search,
// unzoom) instead of its prompt() dialog.

// Sortable tables: a click on a header sorts by that column, numbers by their data-v.
document.querySelectorAll("table.sortable").forEach(function (table) {
  var heads = table.tHead.rows[0].cells;
  Array.prototype.forEach.call(heads, function (th, col) {
    th.title = "sort";
    th.addEventListener("click", function () {
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      var asc = th.getAttribute("aria-sort") === "descending";
      Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", asc ? "ascending" : "descending");
      var key = function (r) {
        var c = r.cells[col];
        var v = c.getAttribute("data-v");
        return v === null ? c.textContent : parseFloat(v);
      };
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        var c = typeof x === "number" ? x - y : String(x).localeCompare(String(y));
        return asc ? c : -c;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});

// Ctrl-F and F3 stay the browser's find on this page (inferno takes them for its prompt).
window.addEventListener("keydown", function (e) {
  if (e.keyCode === 114 || (e.ctrlKey && e.keyCode === 70)) e.stopImmediatePropagation();
}, true);

// Searches match function names: inferno matches a frame's whole title, "name (N
// instructions, P%)", where an anchored expression like ^insert$ would find nothing.
// inferno leaves this function to be replaced for that purpose.
if (typeof g_to_func === "function") {
  g_to_func = function (e) {
    var t = g_to_text(e);
    var i = t.lastIndexOf(" (");
    return i > 0 ? t.slice(0, i) : t;
  };
}

// The flame graph's search box.
(function () {
  var box = document.getElementById("fg-find");
  if (!box || typeof search !== "function") return;
  var out = document.getElementById("fg-matched");
  function ready() {
    // inferno's init runs from the SVG's load event; run it here if that has not fired.
    if (!searchbtn) init(null);
  }
  function clear() {
    reset_search();
    searching = 0;
    searchbtn.classList.remove("show");
    searchbtn.firstChild.nodeValue = "Search";
    matchedtxt.classList.add("hide");
    matchedtxt.firstChild.nodeValue = "";
  }
  function apply() {
    ready();
    clear();
    var term = box.value.trim();
    out.textContent = "";
    if (!term) return;
    try { search(term); } catch (e) { out.textContent = "not a regular expression"; return; }
    out.textContent = searching ? matchedtxt.firstChild.nodeValue : "no function matches";
  }
  box.addEventListener("input", apply);
  document.getElementById("fg-reset").addEventListener("click", function () {
    ready();
    unzoom();
    box.value = "";
    apply();
  });
  window.addEventListener("load", ready);
})();

// The timeline preview: call spans drawn by depth over time, from the trace JSON embedded
// in the page; the same JSON can be saved or opened in the Perfetto UI.
(function () {
  var data = document.getElementById("trace-json");
  var canvas = document.getElementById("tl-canvas");
  if (!data || !canvas) return;
  var text = data.textContent;
  var spans = JSON.parse(text).traceEvents.filter(function (e) { return e.ph === "X"; });
  var end = 1, depths = 0;
  spans.forEach(function (s) {
    end = Math.max(end, s.ts + s.dur);
    depths = Math.max(depths, s.args.depth + 1);
  });
  var ROW = 16, MAXROWS = 30;
  var rows = Math.min(depths, MAXROWS);
  function color(name) {
    var h = 0;
    for (var i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
    return "hsl(" + (10 + h % 40) + "," + (60 + h % 30) + "%," + (55 + (h >> 8) % 15) + "%)";
  }
  function draw() {
    var ratio = window.devicePixelRatio || 1;
    var w = canvas.clientWidth;
    canvas.style.height = rows * ROW + "px";
    canvas.width = w * ratio;
    canvas.height = rows * ROW * ratio;
    var g = canvas.getContext("2d");
    g.scale(ratio, ratio);
    g.font = "11px system-ui, sans-serif";
    g.textBaseline = "middle";
    spans.forEach(function (s) {
      var d = s.args.depth;
      if (d >= rows) return;
      var x = s.ts / end * w, sw = Math.max(s.dur / end * w, 0.6);
      g.fillStyle = color(s.name);
      g.fillRect(x, d * ROW, sw, ROW - 1);
      if (sw > 40) {
        g.fillStyle = "#1f2328";
        g.save();
        g.beginPath();
        g.rect(x, d * ROW, sw, ROW);
        g.clip();
        g.fillText(s.name, x + 3, d * ROW + ROW / 2);
        g.restore();
      }
    });
  }
  var tip = document.getElementById("tl-tip");
  canvas.addEventListener("mousemove", function (e) {
    var r = canvas.getBoundingClientRect();
    var t = (e.clientX - r.left) / r.width * end, d = Math.floor((e.clientY - r.top) / ROW);
    var hit = null;
    for (var i = 0; i < spans.length; i++) {
      var s = spans[i];
      if (s.args.depth === d && s.ts <= t && t <= s.ts + s.dur) { hit = s; break; }
    }
    tip.textContent = hit ? hit.name + ": " + hit.dur.toFixed(3) + " \u00b5s from " + hit.ts.toFixed(3) + " \u00b5s" : "\u00a0";
  });
  window.addEventListener("resize", draw);
  draw();
  var blob = URL.createObjectURL(new Blob([text], { type: "application/json" }));
  var save = document.getElementById("tl-save");
  save.href = blob;
  // Perfetto's documented way to open a trace from another page: PING until it answers
  // PONG, then post the buffer. Nothing is sent unless the button is clicked.
  document.getElementById("tl-perfetto").addEventListener("click", function () {
    var origin = "https://ui.perfetto.dev";
    var win = window.open(origin);
    if (!win) return;
    var buffer = new TextEncoder().encode(text).buffer;
    var timer = setInterval(function () { win.postMessage("PING", origin); }, 100);
    window.addEventListener("message", function onMessage(e) {
      if (e.origin !== origin || e.data !== "PONG") return;
      clearInterval(timer);
      window.removeEventListener("message", onMessage);
      win.postMessage({ perfetto: { buffer: buffer, title: document.title, fileName: "calls.json" } }, origin);
    });
  });
})();
