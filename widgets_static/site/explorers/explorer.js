/* Explorers of the book (quantgemm_kernels/explorers.py writes them into notebook outputs).
 *
 * An explorer is a <div class="qg-explorer"> holding its data as JSON
 * (<script type="application/json" class="qg-explorer-data">): controls, each a list of options,
 * and one precomputed view (plotly traces and layout) per combination of the controls' values,
 * keyed by the values joined with "|". Changing a control draws that view; no Python runs.
 * plotly.js (basic bundle) is loaded from the book's own _static folder, once per page.
 * After each draw the element's data-qg-view names the view shown and data-qg-draws counts draws
 * (the browser test reads both).
 */
(function () {
  "use strict";
  if (window.QGExplorers) { window.QGExplorers.mountAll(); return; }
  var root = document.documentElement.getAttribute("data-content_root") || "";
  var plotly = null;

  function loadPlotly() {
    if (window.Plotly) { return Promise.resolve(window.Plotly); }
    if (!plotly) {
      plotly = new Promise(function (resolve, reject) {
        var s = document.createElement("script");
        s.src = root + "_static/plotly/plotly-basic.min.js";
        s.onload = function () { resolve(window.Plotly); };
        s.onerror = function () { reject(new Error("could not load " + s.src)); };
        document.head.appendChild(s);
      });
    }
    return plotly;
  }

  function isObject(v) { return v && typeof v === "object" && !Array.isArray(v); }

  function merge(a, b) {  // a deep copy of a with b's keys laid over it
    var out = {};
    Object.keys(a || {}).forEach(function (k) { out[k] = isObject(a[k]) ? merge(a[k], {}) : a[k]; });
    Object.keys(b || {}).forEach(function (k) {
      out[k] = isObject(b[k]) && isObject(out[k]) ? merge(out[k], b[k]) : (isObject(b[k]) ? merge(b[k], {}) : b[k]);
    });
    return out;
  }

  function mount(el, Plotly) {
    var spec = JSON.parse(el.querySelector("script.qg-explorer-data").textContent);
    var bar = el.querySelector(".qg-controls");
    var plot = el.querySelector(".qg-plot");
    var note = el.querySelector(".qg-note");
    var fallback = el.querySelector(".qg-fallback");
    if (fallback) { fallback.remove(); }
    var selects = spec.controls.map(function (c) {
      var label = document.createElement("label");
      label.className = "qg-control";
      label.appendChild(document.createTextNode(c.label + " "));
      var sel = document.createElement("select");
      sel.name = c.name;
      c.options.forEach(function (o) {
        var opt = document.createElement("option");
        opt.value = o[0];
        opt.textContent = o[1];
        sel.appendChild(opt);
      });
      sel.value = c.value;
      sel.addEventListener("change", draw);
      label.appendChild(sel);
      bar.appendChild(label);
      return sel;
    });
    var draws = 0;

    function draw() {
      var key = selects.map(function (s) { return s.value; }).join("|");
      var view = spec.views[key];
      var layout = merge(spec.layout, view ? view.layout : {title: {text: spec.missing}});
      note.textContent = view ? (view.note || "") : "";
      Plotly.react(plot, view ? view.traces : [], layout, spec.config || {});
      draws += 1;
      el.setAttribute("data-qg-view", key);
      el.setAttribute("data-qg-draws", String(draws));
    }

    draw();
  }

  function mountAll() {
    var els = Array.prototype.slice.call(document.querySelectorAll(".qg-explorer:not([data-qg-mounted])"));
    if (!els.length) { return; }
    els.forEach(function (el) { el.setAttribute("data-qg-mounted", "loading"); });
    loadPlotly().then(function (Plotly) {
      els.forEach(function (el) {
        try {
          mount(el, Plotly);
          el.setAttribute("data-qg-mounted", "yes");
        } catch (e) {
          el.setAttribute("data-qg-mounted", "failed");
          throw e;
        }
      });
    }, function (e) {
      els.forEach(function (el) {
        el.setAttribute("data-qg-mounted", "failed");
        var n = el.querySelector(".qg-note");
        if (n) { n.textContent = e.message; }
      });
      throw e;
    });
  }

  window.QGExplorers = {mountAll: mountAll, version: 1};
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", mountAll);
  } else {
    mountAll();
  }
})();
