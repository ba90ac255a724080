/* NMTHeatmap: one attention heatmap, self-contained (plain DOM, no dependency), reusable by any
   page: NMTHeatmap.render(container, {src, tgt, weights, links}, {title}).
   weights[j][i] is the weight output word j puts on source word i; links are [i, j] pairs drawn
   as dots. Hovering a cell shows its weight; hovering an output word highlights its attention
   over the source words, and hovering a source word the attention each output word puts on it. */
var NMTHeatmap = (function () {
  "use strict";
  var CSS = [
    "table.nmt-heatmap { border-collapse: collapse; font-size: 12px; }",
    "table.nmt-heatmap td.cell { width: 22px; height: 22px; min-width: 22px; padding: 0; border: 1px solid #fff; position: relative; }",
    'table.nmt-heatmap td.cell.link::after { content: ""; position: absolute; left: 7px; top: 7px; width: 6px; height: 6px;',
    "border-radius: 50%; background: #e8453c; border: 1px solid #fff; }",
    "table.nmt-heatmap td.cell.hot { outline: 2px solid #e8453c; outline-offset: -2px; }",
    "table.nmt-heatmap th { font-weight: normal; padding: 0 4px; white-space: nowrap; }",
    "table.nmt-heatmap th.src { height: 70px; vertical-align: bottom; }",
    "table.nmt-heatmap th.src span { display: inline-block; writing-mode: vertical-rl; transform: rotate(180deg); }",
    "table.nmt-heatmap th.tgt { text-align: right; }",
    "table.nmt-heatmap th.on { font-weight: 700; }",
    ".nmt-hm-info { font-size: 12px; min-height: 1.4em; color: #333; font-variant-numeric: tabular-nums; }",
    ".nmt-hm-legend { display: flex; align-items: center; gap: 4px; font-size: 11px; color: #555; }",
    ".nmt-hm-legend .bar { width: 120px; height: 10px; }"
  ].join("\n");
  function style() {  // the heatmap's own style, added once to the page that uses it
    if (document.getElementById("nmt-heatmap-style")) return;
    var s = document.createElement("style");
    s.id = "nmt-heatmap-style";
    s.textContent = CSS;
    document.head.appendChild(s);
  }
  var VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  function colour(w) {
    var x = Math.max(0, Math.min(1, w)) * (VIRIDIS.length - 1), k = Math.min(Math.floor(x), VIRIDIS.length - 2), f = x - k;
    var a = VIRIDIS[k], b = VIRIDIS[k + 1];
    return "rgb(" + [0, 1, 2].map(function (c) { return Math.round(a[c] + f * (b[c] - a[c])); }).join(",") + ")";
  }
  function highlight(w) { return "rgba(255, 140, 0, " + Math.max(0, Math.min(1, w)).toFixed(3) + ")"; }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function render(container, view, opts) {
    opts = opts || {};
    style();
    container.textContent = "";
    var src = view.src, tgt = view.tgt, W = view.weights;
    var linked = {};
    (view.links || []).forEach(function (l) { linked[l[0] + ":" + l[1]] = true; });
    var info = el("div", "nmt-hm-info", "\u00a0");
    var table = el("table", "nmt-heatmap");
    var head = el("tr");
    head.appendChild(el("th"));
    var srcTh = src.map(function (word, i) {
      var th = el("th", "src");
      th.appendChild(el("span", null, word));
      th.dataset.i = i;
      head.appendChild(th);
      return th;
    });
    table.appendChild(head);
    var tgtTh = [], cells = [];
    tgt.forEach(function (word, j) {
      var tr = el("tr"), th = el("th", "tgt", word);
      th.dataset.j = j;
      tgtTh.push(th);
      tr.appendChild(th);
      cells.push(src.map(function (_, i) {
        var td = el("td", "cell" + (linked[i + ":" + j] ? " link" : ""));
        td.style.background = colour(W[j][i]);
        td.dataset.i = i;
        td.dataset.j = j;
        tr.appendChild(td);
        return td;
      }));
      table.appendChild(tr);
    });
    function clear() {
      srcTh.forEach(function (th) { th.style.background = ""; th.classList.remove("on"); });
      tgtTh.forEach(function (th) { th.style.background = ""; th.classList.remove("on"); });
      cells.forEach(function (row) { row.forEach(function (td) { td.classList.remove("hot"); }); });
      info.textContent = "\u00a0";
    }
    table.addEventListener("mouseover", function (ev) {
      var t = ev.target.closest("td.cell, th.src, th.tgt");
      if (!t) return;
      clear();
      if (t.classList.contains("cell")) {
        var i = +t.dataset.i, j = +t.dataset.j;
        t.classList.add("hot");
        srcTh[i].classList.add("on");
        tgtTh[j].classList.add("on");
        info.textContent = tgt[j] + " \u2192 " + src[i] + ": " + W[j][i].toFixed(3) + (linked[i + ":" + j] ? " (aligned)" : "");
      } else if (t.classList.contains("tgt")) {
        var r = +t.dataset.j;
        t.classList.add("on");
        srcTh.forEach(function (th, i) { th.style.background = highlight(W[r][i]); });
        cells[r].forEach(function (td) { td.classList.add("hot"); });
        info.textContent = "\u201c" + tgt[r] + "\u201d attends to the source words shaded orange";
      } else {
        var c = +t.dataset.i;
        t.classList.add("on");
        tgtTh.forEach(function (th, j) { th.style.background = highlight(W[j][c]); cells[j][c].classList.add("hot"); });
        info.textContent = "output words shaded by their attention on \u201c" + src[c] + "\u201d";
      }
    });
    table.addEventListener("mouseleave", clear);
    var legend = el("div", "nmt-hm-legend");
    var bar = el("div", "bar");
    bar.style.background = "linear-gradient(to right," + [0, 0.25, 0.5, 0.75, 1].map(colour).join(",") + ")";
    legend.appendChild(el("span", null, "attention weight 0"));
    legend.appendChild(bar);
    legend.appendChild(el("span", null, "1" + (view.links && view.links.length ? "; dots: alignment links" : "")));
    if (opts.title) container.appendChild(el("h3", null, opts.title));
    container.appendChild(table);
    container.appendChild(legend);
    container.appendChild(info);
    return { table: table, info: info };
  }
  return { render: render, colour: colour };
})();
