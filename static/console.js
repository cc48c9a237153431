// GPU console: the few behaviours HTML alone cannot give. No inline scripts anywhere (the
// Content-Security-Policy forbids them); every page works without this file.
(function () {
  "use strict";

  function visible() {
    return document.visibilityState === "visible";
  }

  // -- Create job: "Modify Configuration" opens only while fault tolerance is on ----------
  function faultTolerancePanel(root) {
    var toggle = root.querySelector("[data-ft-toggle]");
    var panel = root.querySelector("[data-ft-panel]");
    if (!toggle || !panel) return;
    var summary = panel.querySelector("summary");
    function sync() {
      panel.classList.toggle("disabled", !toggle.checked);
      if (summary) summary.setAttribute("aria-disabled", String(!toggle.checked));
      if (!toggle.checked) panel.open = false;
    }
    toggle.addEventListener("change", function () {
      sync();
      if (toggle.checked) panel.open = true;
    });
    // The click (and Enter/Space, which click a summary) is refused at once; closing it
    // again on "toggle" would let it open for a moment (the event comes a task later).
    if (summary) {
      summary.addEventListener("click", function (event) {
        if (!toggle.checked && !panel.open) event.preventDefault();
      });
    }
    panel.addEventListener("toggle", function () {
      if (panel.open && !toggle.checked) panel.open = false;
    });
    sync();
  }

  // -- Confirmations: a form with data-confirm asks first (Stop); no inline handlers (CSP).
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form && form.getAttribute && form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) event.preventDefault();
  }, true);

  // -- Job page: charts (uPlot) ------------------------------------------------------------
  var PALETTE = ["#2f5fd0", "#c23934", "#17843a", "#9a4a0b", "#6b3fb3", "#0a7a8a", "#8a5a00", "#444"];

  function chartOptions(width, data) {
    var series = [{}];
    data.series.forEach(function (s, i) {
      series.push({ label: s.label, stroke: PALETTE[i % PALETTE.length], width: 1.5, spanGaps: true });
    });
    return {
      width: width,
      height: 180,
      series: series,
      // The page shows times in 24-hour UTC: so do the axes (ticks on UTC boundaries too).
      tzDate: function (ts) { return window.uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"); },
      scales: { x: { time: true, range: timeRange } },
      axes: [{ values: utcTicks, label: "UTC", labelSize: 14 }, { size: 50 }],
      legend: { live: false },
    };
  }

  // One sample (or all at one instant): uPlot stretches the axis over years (it hands the
  // range a widened span), so look at the data itself and show a minute either side.
  function timeRange(u, min, max) {
    var xs = u.data && u.data[0];
    if (xs && xs.length && xs[xs.length - 1] - xs[0] < 1) return [xs[0] - 60, xs[0] + 60];
    return [min, max];
  }

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  function utcTicks(u, splits) {
    var span = splits.length > 1 ? splits[splits.length - 1] - splits[0] : 0;
    return splits.map(function (ts) {
      var d = new Date(ts * 1e3);
      var hm = pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes());
      if (span < 180) return hm + ":" + pad(d.getUTCSeconds());
      if (span < 2 * 86400) return hm;
      return d.getUTCFullYear() + "-" + pad(d.getUTCMonth() + 1) + "-" + pad(d.getUTCDate()) + " " + hm;
    });
  }

  function charts(section) {
    var url = section.getAttribute("data-src");
    var plots = {};
    function draw(payload) {
      section.querySelectorAll("[data-chart]").forEach(function (figure) {
        var key = figure.getAttribute("data-chart");
        var data = payload[key];
        var holder = figure.querySelector(".chart-plot");
        if (!data || !data.t.length) return;
        var columns = [data.t].concat(data.series.map(function (s) { return s.values; }));
        var width = Math.max(holder.clientWidth, 240);
        if (plots[key] && plots[key].series.length === columns.length) {
          plots[key].setData(columns);
          return;
        }
        if (plots[key]) plots[key].destroy();
        holder.textContent = "";
        plots[key] = new window.uPlot(chartOptions(width, data), columns, holder);
        holder.uplot = plots[key]; // for the browser tests: the drawn scales and tick labels
      });
      section.setAttribute("data-loaded", "");
    }
    function load() {
      fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (payload) {
          if (!payload) return;
          draw(payload);
          if (payload.live) setTimeout(function () { if (visible()) load(); else setTimeout(load, 15000); }, 15000);
        })
        .catch(function () { setTimeout(load, 15000); });
    }
    if (window.uPlot) load();
  }

  // -- Job page: the log viewer ------------------------------------------------------------
  // Follows new lines (polls twice a second while the tab is visible), keeps the view at the
  // bottom unless the reader scrolled up, searches, jumps to the first error and shows the
  // console's receive times. Lines are inserted with textContent: log text is never HTML.
  var ERROR = /\b(error|exception|traceback|fatal|panic|failed|segmentation fault)\b/i;
  var POLL_MS = 500;

  function logViewer(box) {
    var url = box.getAttribute("data-src");
    var after = parseInt(box.getAttribute("data-after") || "-1", 10);
    var live = box.hasAttribute("data-live");
    var search = document.querySelector("[data-log-search]");
    var matches = document.querySelector("[data-log-matches]");
    var firstError = document.querySelector("[data-log-first-error]");
    var times = document.querySelector("[data-log-times]");
    var follow = document.querySelector("[data-log-follow]");
    var jump = document.querySelector("[data-log-jump]");
    var current = -1;

    function atBottom() {
      return box.scrollHeight - box.scrollTop - box.clientHeight < 8;
    }
    function toBottom() {
      box.scrollTop = box.scrollHeight;
      if (jump) jump.hidden = true;
    }
    function line(entry) {
      var div = document.createElement("div");
      div.className = "log-line";
      div.setAttribute("data-seq", entry.seq);
      var time = document.createElement("time");
      if (entry.at) {
        time.setAttribute("datetime", entry.at);
        time.textContent = entry.at.slice(11, 19);
      }
      var seq = document.createElement("span");
      seq.className = "seq";
      seq.textContent = entry.seq;
      div.appendChild(time);
      div.appendChild(seq);
      div.appendChild(document.createTextNode(entry.text));
      markMatch(div);
      return div;
    }
    function append(entries) {
      if (!entries.length) return;
      var stick = follow ? follow.checked && atBottom() : atBottom();
      var fragment = document.createDocumentFragment();
      entries.forEach(function (e) { fragment.appendChild(line(e)); });
      box.appendChild(fragment);
      if (stick) toBottom();
      else if (jump) jump.hidden = false;
      updateCount();
    }
    // The worker restarted (a new attempt, its lines numbered from 0 again): go on there,
    // and so do the toolbar's "Full log" and "Download raw" links.
    function withAttempt(href, attempt) {
      return href.replace(/([?&]attempt=)\d+/, "$1" + attempt);
    }
    function nextAttempt(attempt) {
      url = withAttempt(url, attempt);
      box.setAttribute("data-src", url);
      after = -1;
      box.setAttribute("data-after", after);
      document.querySelectorAll(".log-toolbar a[href]").forEach(function (a) {
        a.setAttribute("href", withAttempt(a.getAttribute("href"), attempt));
      });
      var stick = atBottom();
      var mark = document.createElement("div");
      mark.className = "log-attempt";
      mark.textContent = "attempt " + attempt;
      box.appendChild(mark);
      if (stick) toBottom();
    }
    function poll() {
      if (!live) return;
      if (!visible()) { setTimeout(poll, POLL_MS * 4); return; }
      fetch(url + "&after=" + after, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (page) {
          if (page) {
            append(page.lines);
            after = page.next_after;
            box.setAttribute("data-after", after);
            if (page.complete) { live = false; box.removeAttribute("data-live"); return; }
            if (page.newer_attempt && !page.lines.length) nextAttempt(page.newer_attempt);
          }
          setTimeout(poll, page && (page.lines.length || page.newer_attempt) ? 0 : POLL_MS);
        })
        .catch(function () { setTimeout(poll, POLL_MS * 4); });
    }

    // Search: highlight matching lines; Enter goes to the next one.
    function term() {
      return search ? search.value.trim().toLowerCase() : "";
    }
    function markMatch(div) {
      var t = term();
      div.classList.toggle("match", !!t && div.textContent.toLowerCase().indexOf(t) >= 0);
    }
    function updateCount() {
      if (!matches) return;
      var n = box.querySelectorAll(".log-line.match").length;
      matches.textContent = term() ? n + (n === 1 ? " match" : " matches") : "";
    }
    function reveal(div) {
      box.querySelectorAll(".log-line.current").forEach(function (d) { d.classList.remove("current"); });
      div.classList.add("current");
      box.scrollTop = div.offsetTop - box.offsetTop - box.clientHeight / 3;
    }
    if (search) {
      search.addEventListener("input", function () {
        box.querySelectorAll(".log-line").forEach(markMatch);
        current = -1;
        updateCount();
      });
      search.addEventListener("keydown", function (event) {
        if (event.key !== "Enter") return;
        event.preventDefault();
        var found = box.querySelectorAll(".log-line.match");
        if (!found.length) return;
        current = (current + 1) % found.length;
        if (follow) follow.checked = false;
        reveal(found[current]);
      });
    }
    if (firstError) {
      firstError.addEventListener("click", function () {
        var lines = box.querySelectorAll(".log-line");
        for (var i = 0; i < lines.length; i++) {
          if (ERROR.test(lines[i].lastChild ? lines[i].lastChild.textContent : "")) {
            if (follow) follow.checked = false;
            reveal(lines[i]);
            if (matches) matches.textContent = "first error: line " + lines[i].getAttribute("data-seq");
            return;
          }
        }
        if (matches) matches.textContent = "no error in the lines shown";
      });
    }
    if (times) {
      times.addEventListener("change", function () { box.classList.toggle("show-times", times.checked); });
    }
    if (follow) {
      follow.addEventListener("change", function () { if (follow.checked) toBottom(); });
    }
    if (jump) {
      jump.addEventListener("click", function () { if (follow) follow.checked = true; toBottom(); });
    }
    box.addEventListener("scroll", function () { if (atBottom() && jump) jump.hidden = true; });
    toBottom();
    poll();
  }

  // HTMX polling (elements marked data-poll) pauses while the tab is hidden. Trigger filters
  // such as [document.visibilityState === 'visible'] would need eval, which the CSP forbids.
  document.addEventListener("htmx:beforeRequest", function (event) {
    var elt = event.detail && event.detail.elt;
    if (elt && elt.hasAttribute("data-poll") && !visible()) event.preventDefault();
  });

  function init() {
    document.querySelectorAll("form.job-form").forEach(faultTolerancePanel);
    document.querySelectorAll("section.charts[data-src]").forEach(charts);
    var log = document.querySelector("#log-lines[data-src]");
    if (log) logViewer(log);
  }

  // A swapped-in report (the Usage page's period picker) brings its own charts.
  document.addEventListener("htmx:afterSettle", function (event) {
    var target = event.detail && event.detail.elt;
    if (target && target.querySelectorAll) target.querySelectorAll("section.charts[data-src]").forEach(charts);
  });

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
