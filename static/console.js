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

  // -- Charts (uPlot): the job page's and the Usage page's ---------------------------------
  var PALETTE = ["#2f5fd0", "#c23934", "#17843a", "#9a4a0b", "#6b3fb3", "#0a7a8a", "#8a5a00", "#444"];

  // The time axis. Ticks come from the range and the room there is for their labels: the
  // finest step whose labels fit side by side, at whole multiples of the step (UTC), each
  // labelled as precisely as the step needs (seconds only below a minute, the day once the
  // range is a day or more), so no two labels read the same. The labels are HTML elements
  // under the plot (placeTicks), which a test can measure.
  var DAY = 86400;
  var STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
    43200, DAY, 2 * DAY, 7 * DAY, 14 * DAY, 28 * DAY, 56 * DAY, 91 * DAY, 182 * DAY, 364 * DAY];
  var TICK_FONT = "12px system-ui, -apple-system, 'Segoe UI', sans-serif";
  var TICK_GAP = 16; // px at least between two labels
  var SAMPLES = { hms: "00:00:00", hm: "00:00", dhm: "00-00 00:00", d: "00-00", ymd: "0000-00-00" };
  var measuring = null;

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  function textWidth(text) {
    if (!measuring) {
      measuring = document.createElement("canvas").getContext("2d");
      measuring.font = TICK_FONT;
    }
    return measuring.measureText(text).width;
  }

  function tickFormat(step, span) {
    if (step < 60) return "hms";
    if (step < DAY) return span < DAY ? "hm" : "dhm";
    return span < 360 * DAY ? "d" : "ymd";
  }

  function tickLabel(ts, format) {
    var d = new Date(ts * 1e3);
    var day = pad(d.getUTCMonth() + 1) + "-" + pad(d.getUTCDate());
    var hm = pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes());
    if (format === "hms") return hm + ":" + pad(d.getUTCSeconds());
    if (format === "hm") return hm;
    if (format === "dhm") return day + " " + hm;
    if (format === "d") return day;
    return d.getUTCFullYear() + "-" + day;
  }

  // {step, ticks, labels} for the range [min, max] (seconds) drawn over `width` px.
  function timeTicks(min, max, width) {
    var span = Math.max(max - min, 1);
    var step = STEPS[STEPS.length - 1];
    for (var i = 0; i < STEPS.length; i++) {
      var room = textWidth(SAMPLES[tickFormat(STEPS[i], span)]) + TICK_GAP;
      if ((span / STEPS[i]) * room <= width) { step = STEPS[i]; break; }
    }
    var format = tickFormat(step, span);
    var ticks = [];
    for (var t = Math.ceil(min / step) * step; t <= max; t += step) ticks.push(t);
    if (!ticks.length) ticks.push(min);
    return { step: step, ticks: ticks, labels: ticks.map(function (x) { return tickLabel(x, format); }) };
  }

  // The labels as elements under the plot, centred on their ticks, kept inside the chart; a
  // label that would still touch its neighbour (at the edges) is left out.
  function placeTicks(u) {
    var wrap = u.root.querySelector(".u-wrap");
    var row = wrap.querySelector(".chart-ticks");
    if (!row) {
      row = document.createElement("div");
      row.className = "chart-ticks";
      row.setAttribute("aria-hidden", "true"); // the table and the legend carry the numbers
      wrap.appendChild(row);
    }
    row.textContent = "";
    row.style.top = (u.over.offsetTop + u.over.offsetHeight + 5) + "px";
    var found = u._timeTicks || { ticks: [], labels: [] };
    var right = -Infinity;
    var limit = wrap.clientWidth;
    found.ticks.forEach(function (t, i) {
      var x = u.over.offsetLeft + u.valToPos(t, "x");
      if (x < u.over.offsetLeft - 1 || x > u.over.offsetLeft + u.over.offsetWidth + 1) return;
      var span = document.createElement("span");
      span.textContent = found.labels[i];
      span.style.font = TICK_FONT;
      row.appendChild(span);
      var w = span.offsetWidth;
      var left = Math.min(Math.max(x - w / 2, 0), limit - w);
      if (left < right + 4) { row.removeChild(span); return; }
      span.style.left = left + "px";
      right = left + w;
    });
  }

  function chartOptions(width, data) {
    var series = [{}];
    data.series.forEach(function (s, i) {
      series.push({ label: s.label, stroke: PALETTE[i % PALETTE.length], width: 1.5, spanGaps: true });
    });
    return {
      width: width,
      height: 180,
      series: series,
      scales: { x: { time: true, range: timeRange } },
      axes: [
        {
          // uPlot hands the plot's width to `space` first: the ticks are ours (timeTicks).
          space: function (u, axis, min, max, dim) { u._plotWidth = dim; return 40; },
          splits: function (u, axis, min, max) {
            u._timeTicks = timeTicks(min, max, u._plotWidth || u.width);
            return u._timeTicks.ticks;
          },
          values: function (u, splits) { return splits.map(function () { return ""; }); },
          ticks: { size: 4 },
          size: 24,
          label: "UTC",
          labelSize: 16,
        },
        { size: 50 },
      ],
      legend: { live: false },
      hooks: { draw: [placeTicks] },
    };
  }

  // One sample (or all at one instant): uPlot stretches the axis over years (it hands the
  // range a widened span), so look at the data itself and show a minute either side.
  function timeRange(u, min, max) {
    var xs = u.data && u.data[0];
    if (xs && xs.length && xs[xs.length - 1] - xs[0] < 1) return [xs[0] - 60, xs[0] + 60];
    return [min, max];
  }

  function plotWidth(holder) { return Math.max(holder.clientWidth, 240); }

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
        if (plots[key] && plots[key].series.length === columns.length) {
          plots[key].setData(columns);
          return;
        }
        if (plots[key]) plots[key].destroy();
        holder.textContent = "";
        plots[key] = new window.uPlot(chartOptions(plotWidth(holder), data), columns, holder);
        holder.uplot = plots[key]; // for the browser tests: the drawn scales and data
        // A narrower window (a phone turned, a side panel) redraws at the new width.
        if (window.ResizeObserver && !holder.hasAttribute("data-resizing")) {
          holder.setAttribute("data-resizing", "");
          new ResizeObserver(function () {
            var plot = holder.uplot;
            if (plot && plot.width !== plotWidth(holder)) plot.setSize({ width: plotWidth(holder), height: 180 });
          }).observe(holder);
        }
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

  // The time axis's rule, for the browser tests' table of ranges and widths.
  window.GpuConsole = { timeTicks: timeTicks };

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
            if (page.complete) {
              live = false;
              box.removeAttribute("data-live");
              var gap = document.querySelector("[data-log-gap]");
              if (gap && page.log_gap) { gap.textContent = page.log_gap; gap.hidden = false; }
              return;
            }
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
