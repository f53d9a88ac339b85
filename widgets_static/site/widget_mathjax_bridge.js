// Our own file (the rest of widgets_static/site is vendored). Loaded on pages with widgets.
//
// The ipywidgets HTML manager typesets widget labels with MathJax 2's API,
// MathJax.Hub.Queue(["Typeset", MathJax.Hub, element]). Sphinx loads MathJax 3, which has no Hub.
// Without this bridge, every widget with a label throws "Cannot read properties of undefined
// (reading 'Queue')". With it, labels go to MathJax 3. Sphinx configures MathJax 3 for \( \)
// delimiters only, so a label typesets as "\\(d_w\\) bits" and not as "$d_w$ bits".
(function () {
  "use strict";

  function typeset(element) {
    var mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise && mj.typesetPromise) {
      mj.startup.promise
        .then(function () { return mj.typesetPromise([element]); })
        .catch(function (err) { console.warn("MathJax could not typeset a widget label:", err); });
    } else {
      // MathJax 3 is loaded with `defer` and may not have started yet.
      window.addEventListener("load", function () { typeset(element); }, { once: true });
    }
  }

  var hub = {
    Queue: function (job) {
      if (job && job[2]) typeset(job[2]);
    },
  };

  function install() {
    if (window.MathJax && !window.MathJax.Hub) window.MathJax.Hub = hub;
  }

  // First on the configuration object that Sphinx defines. MathJax 3 replaces that object with its
  // own when its deferred script runs, before DOMContentLoaded, so install again then.
  install();
  document.addEventListener("DOMContentLoaded", install);
})();
