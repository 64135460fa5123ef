// The console's script: asks /admin/api/overview with the operator's key, every few seconds
// while the page is in view, and shows what it answers.
//
// Everything shown comes from the service's callers (a stderr line, a key's name) and may be
// hostile, so nothing is ever parsed as HTML: every node is made here and every string goes in
// as text (textContent, setAttribute). The key stays in this tab (sessionStorage), never in a
// cookie: it travels in X-Admin-Key, which no other site can make a browser send.
"use strict";

(() => {
  const API = "/admin/api/overview";
  const EVERY_MS = 2000; // a runner that stops is shown down within the next two refreshes
  const TIMEOUT_MS = 10000;
  const STORED = "codeexec-admin-key";
  const MINUTES = 60;
  const SVG = "http://www.w3.org/2000/svg";
  const FAILURE_KINDS = ["error", "timeout", "memory", "cancelled", "refused"];

  let key = sessionStorage.getItem(STORED) || "";
  let timer = 0;
  let asking = false;
  let last = null; // the latest overview, drawn again when the window's width changes

  const $ = (id) => document.getElementById(id);

  // An element with attributes (className for the class) and children (strings become text).
  function el(tag, attrs, ...children) {
    return made(document.createElement(tag), attrs, children);
  }

  function svg(tag, attrs, ...children) {
    return made(document.createElementNS(SVG, tag), attrs, children);
  }

  function made(node, attrs, children) {
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value !== undefined && value !== null) node.setAttribute(name === "className" ? "class" : name, String(value));
    }
    for (const child of children.flat()) {
      if (child !== undefined && child !== null) node.append(typeof child === "string" || typeof child === "number" ? String(child) : child);
    }
    return node;
  }

  // --- figures as people read them ---

  function bytes(n) {
    if (!n) return "0 B";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    const i = Math.min(Math.floor(Math.log(n) / Math.log(1024)), units.length - 1);
    return `${(n / 1024 ** i).toFixed(i && n / 1024 ** i < 10 ? 1 : 0)} ${units[i]}`;
  }

  function seconds(s) {
    if (s === null || s === undefined) return "–";
    if (s === 0) return "0 s";
    if (s < 1) return `${Math.round(s * 1000)} ms`;
    if (s < 60) return `${round(s, s < 10 ? 2 : 1)} s`;
    if (s < 3600) return `${round(s / 60, 1)} min`;
    return `${round(s / 3600, 1)} h`;
  }

  const round = (n, digits) => String(Number(n.toFixed(digits)));

  function clock(at, withSeconds = true) {
    const options = { hour: "2-digit", minute: "2-digit", hourCycle: "h23" };
    if (withSeconds) options.second = "2-digit";
    return new Date(at * 1000).toLocaleTimeString([], options);
  }

  const count = (n) => Number(n || 0).toLocaleString();
  const runnerName = (name) => (/^\d+$/.test(name) ? `runner ${name}` : name);
  const sum = (values) => values.reduce((a, b) => a + b, 0);

  // --- asking ---

  async function refresh() {
    if (asking || !key) return;
    asking = true;
    clearTimeout(timer);
    const given = key;
    try {
      const answer = await fetch(API, {
        headers: { "X-Admin-Key": given }, cache: "no-store", credentials: "omit",
        signal: AbortSignal.timeout(TIMEOUT_MS),
      });
      if (key !== given) return; // the operator changed the key meanwhile
      if (answer.status === 401) return askForKey("That key was refused: enter the console's key again.");
      const body = await answer.json().catch(() => ({}));
      if (!answer.ok) throw new Error(body.details || `the service answered ${answer.status}`);
      last = body;
      show(body);
      status(`Updated ${clock(body.at)} · every ${EVERY_MS / 1000} s while in view`, "ok");
    } catch (error) {
      status(`Not updated${last ? ` since ${clock(last.at)}` : ""}: ${error.message || error}`, "stale");
    } finally {
      asking = false;
      schedule();
    }
  }

  // The next refresh, only while the page is in view: a console nobody looks at asks nothing.
  function schedule() {
    clearTimeout(timer);
    if (key && document.visibilityState === "visible") timer = setTimeout(refresh, EVERY_MS);
  }

  function status(text, kind) {
    const line = $("status");
    line.textContent = text;
    line.className = kind;
  }

  function askForKey(refused) {
    key = "";
    sessionStorage.removeItem(STORED);
    clearTimeout(timer);
    $("console").hidden = true;
    $("forget").hidden = true;
    $("login").hidden = false;
    $("refused").textContent = refused;
    $("refused").hidden = !refused;
    status("Waiting for the key", "");
    $("key").value = "";
    $("key").focus();
  }

  function useKey(given) {
    key = given;
    sessionStorage.setItem(STORED, key);
    $("login").hidden = true;
    $("forget").hidden = false;
    status("Loading…", "");
    refresh();
  }

  // --- showing ---

  function show(view) {
    $("console").hidden = false;
    // A host that did not answer told neither its hour nor who holds what on it.
    const silent = (view.hosts || []).filter((h) => !h.answered).map((h) => runnerName(h.name));
    $("silent").hidden = !silent.length;
    $("silent").textContent = silent.length
      ? `${silent.join(", ")} did not answer: ${silent.length > 1 ? "their" : "its"} runs, failures and users are not in the figures below.`
      : "";
    showHosts(view.hosts || []);
    showRuns(view.minutes || [], view.at);
    showFailures(view.failures || []);
    showUsage(view.usage || {}, view.keys || []);
    showSettings(view.settings || {});
  }

  function showHosts(hosts) {
    const up = hosts.filter((h) => h.state === "up").length;
    $("fleet-summary").textContent = `${up} of ${hosts.length} up`;
    $("hosts").replaceChildren(...hosts.map(hostCard));
  }

  function hostCard(host) {
    const pools = Object.entries(host.pools || {});
    const limit = host.bytes_limit || 1;
    return el("article", { className: `host state-${host.state}`, "data-host": host.name },
      el("header", {},
        el("h3", {}, runnerName(host.name)),
        el("span", { className: "badge" }, host.state)),
      host.state !== "up" ? el("p", { className: "note" }, "as it last told") : null,
      host.state === "up" && !host.answered ? el("p", { className: "note" }, "did not answer the console") : null,
      el("dl", { className: "figures" },
        figure("Runs now", count(host.runs)),
        figure("Sessions", count(host.sessions)),
        figure("Disk", `${bytes(host.bytes_used)} of ${bytes(host.bytes_limit)}`)),
      el("div", { className: "disk" },
        el("meter", { min: 0, max: limit, value: host.bytes_used || 0, low: limit * 0.7, high: limit * 0.85, optimum: 0,
          "aria-label": "disk used" }),
        el("span", {}, `${Math.round((100 * (host.bytes_used || 0)) / limit)} %`)),
      pools.length
        ? el("p", { className: "pools" }, "Warm: ",
          pools.map(([kind, pool], i) => [i ? " · " : "",
            el("b", {}, kind), ` ${count(pool.ready)} ready, ${count(pool.hits)} hits, ${count(pool.misses)} misses`]))
        : el("p", { className: "pools" }, "Warm: none"));
  }

  function figure(label, value) {
    return el("div", {}, el("dt", {}, label), el("dd", {}, value));
  }

  function showRuns(minutes, at) {
    const runs = sum(minutes.map((m) => m.runs));
    const byKind = {};
    for (const minute of minutes) {
      for (const [kind, n] of Object.entries(minute.failures || {})) byKind[kind] = (byKind[kind] || 0) + n;
    }
    const failed = sum(Object.values(byKind));
    const limited = sum(minutes.map((m) => m.rate_limited || 0));
    const kinds = Object.entries(byKind).map(([kind, n]) => `${kind} ${count(n)}`).join(", ");
    $("runs-summary").replaceChildren(
      stat("Runs", count(runs)), stat("Failed", `${count(failed)}${kinds ? ` (${kinds})` : ""}`),
      stat("429s", count(limited)));
    const slots = lastHour(minutes, at);
    $("runs-chart").replaceChildren(runsChart(slots));
    $("durations-chart").replaceChildren(durationsChart(slots));
    $("runs-legend").replaceChildren(
      ...["ok", ...FAILURE_KINDS, "limited"].map((kind) =>
        el("li", {}, svg("svg", { width: 12, height: 12, "aria-hidden": "true" },
          svg("rect", { width: 12, height: 12, rx: 2, className: `fill-${kind}` })),
        kind === "limited" ? "429" : kind)));
  }

  function stat(label, value) {
    return el("span", { className: "stat" }, el("span", { className: "label" }, label), " ", el("b", {}, value));
  }

  // The hour's 60 minutes up to the one of `at`, each with its figures or none.
  function lastHour(minutes, at) {
    const by = new Map(minutes.map((m) => [m.at, m]));
    const now = Math.floor(at / 60) * 60;
    return Array.from({ length: MINUTES }, (_, i) => {
      const start = now - (MINUTES - 1 - i) * 60;
      return by.get(start) || { at: start, runs: 0, failures: {}, rate_limited: 0, p50: null, p95: null };
    });
  }

  // The frame both charts share: their width is the page's, so their text stays readable on a phone.
  function frame(container, height) {
    const width = Math.max(container.clientWidth || 600, 280);
    const box = { left: 52, right: 8, top: 8, bottom: 20 };
    box.width = width - box.left - box.right;
    box.height = height - box.top - box.bottom;
    box.step = box.width / MINUTES;
    return { width, height, box };
  }

  function axes(f, slots, top, label) {
    const { box } = f;
    const parts = [];
    for (const share of [0, 0.5, 1]) {
      const y = box.top + box.height * (1 - share);
      parts.push(svg("line", { x1: box.left, x2: box.left + box.width, y1: y, y2: y, className: "grid" }));
      parts.push(svg("text", { x: box.left - 4, y: y + 4, className: "tick end" }, label(top * share)));
    }
    slots.forEach((slot, i) => {
      if (i % 15 === 0 || i === MINUTES - 1) {
        const x = box.left + box.step * (i + 0.5);
        parts.push(svg("text", { x, y: f.height - 4, className: `tick ${i === MINUTES - 1 ? "end" : "middle"}` },
          clock(slot.at, false)));
      }
    });
    return parts;
  }

  // The top of a chart's scale: a round figure at or above `n` whose half is round too.
  function nice(n, steps = [1, 2, 4, 6, 8, 10]) {
    const step = 10 ** Math.floor(Math.log10(n));
    return steps.map((m) => m * step).find((m) => m >= n);
  }

  function runsChart(slots) {
    const f = frame($("runs-chart"), 170);
    const { box } = f;
    const top = nice(Math.max(...slots.map((s) => s.runs), 2));
    const y = (n) => (n / top) * box.height;
    const bars = [];
    slots.forEach((slot, i) => {
      const failures = slot.failures || {};
      const failed = sum(Object.values(failures));
      const x = box.left + box.step * i + 1;
      const w = Math.max(box.step - 2, 1);
      let base = box.top + box.height;
      const parts = [["ok", Math.max(slot.runs - failed, 0)], ...Object.entries(failures)];
      const tip = `${clock(slot.at, false)}: ${count(slot.runs)} runs` +
        Object.entries(failures).map(([k, n]) => `, ${count(n)} ${k}`).join("") +
        (slot.rate_limited ? `, ${count(slot.rate_limited)} refused (429)` : "") +
        (slot.p50 !== null ? `; p50 ${seconds(slot.p50)}, p95 ${seconds(slot.p95)}` : "");
      const group = svg("g", {}, svg("title", {}, tip));
      for (const [kind, n] of parts) {
        if (!n) continue;
        const h = y(n);
        base -= h;
        const known = kind === "ok" || FAILURE_KINDS.includes(kind) ? kind : "other";
        group.append(svg("rect", { x, y: base, width: w, height: h, className: `fill-${known}` }));
      }
      if (slot.rate_limited) {
        group.append(svg("rect", { x, y: box.top + box.height + 1, width: w, height: 3, className: "fill-limited" }));
      }
      // Empty minutes take the pointer too, so every minute has its tip.
      group.append(svg("rect", { x: x - 1, y: box.top, width: box.step, height: box.height, className: "hit" }));
      bars.push(group);
    });
    return svg("svg", {
      width: f.width, height: f.height, viewBox: `0 0 ${f.width} ${f.height}`, role: "img",
      "aria-label": `Runs per minute over the last hour, at most ${top}`,
    }, axes(f, slots, top, (v) => count(Math.round(v))), bars);
  }

  function durationsChart(slots) {
    const f = frame($("durations-chart"), 130);
    const { box } = f;
    const measured = slots.map((s, i) => [s, i]).filter(([s]) => s.p95 !== null && s.p95 !== undefined);
    const top = nice(Math.max(...measured.map(([s]) => s.p95), 0.01) * 1.05, [1, 2, 5, 10]);
    const y = (v) => box.top + box.height * (1 - v / top);
    const x = (i) => box.left + box.step * (i + 0.5);
    const marks = [];
    for (const [name, field] of [["p95", "p95"], ["p50", "p50"]]) {
      let previous = null;
      for (const [slot, i] of measured) {
        if (previous && previous[1] === i - 1) {
          marks.push(svg("line", { x1: x(previous[1]), y1: y(previous[0][field]), x2: x(i), y2: y(slot[field]), className: `line-${name}` }));
        }
        marks.push(svg("circle", { cx: x(i), cy: y(slot[field]), r: name === "p95" ? 3.5 : 2.5, className: `dot-${name}` },
          svg("title", {}, `${clock(slot.at, false)}: ${name} ${seconds(slot[field])}`)));
        previous = [slot, i];
      }
    }
    const key = [["p95", box.left + 8], ["p50", box.left + 56]].map(([name, kx]) => svg("g", {},
      svg("circle", { cx: kx, cy: box.top + 6, r: 3, className: `dot-${name}` }),
      svg("text", { x: kx + 7, y: box.top + 10, className: "tick" }, name)));
    return svg("svg", {
      width: f.width, height: f.height, viewBox: `0 0 ${f.width} ${f.height}`, role: "img",
      "aria-label": "Run durations per minute over the last hour, p50 and p95",
    }, axes(f, slots, top, seconds), marks, measured.length ? key : []);
  }

  // A table's rows anew; each cell labelled with its column's name, which a phone shows beside it.
  function rows(table, items, empty, row) {
    const names = [...$(table).tHead.rows[0].cells].map((th) => th.textContent);
    const made = items.map((item) => {
      const tr = row(item);
      [...tr.cells].forEach((td, i) => td.setAttribute("data-label", names[i]));
      return tr;
    });
    $(table).tBodies[0].replaceChildren(...(made.length
      ? made
      : [el("tr", { className: "empty" }, el("td", { colspan: names.length }, empty))]));
  }

  function cell(value, className) {
    return el("td", { className }, value);
  }

  function showFailures(failures) {
    rows("failures-table", failures, "No failed run in the last hour.", (f) => el("tr", {},
      cell(clock(f.at)), cell(f.lang), cell(el("span", { className: `outcome fill-${FAILURE_KINDS.includes(f.outcome) ? f.outcome : "other"}` }, f.outcome)),
      cell(f.user || "–", "id"), cell(f.session || "–", "id"), cell(runnerName(f.host || "")),
      cell(el("code", {}, f.stderr || ""), "stderr")));
  }

  function showUsage(usage, keys) {
    rows("users-table", usage.users || [], "No one holds anything.", (u) => el("tr", {},
      cell(u.id, "id"), cell(u.org, "id"), cell(bytes(u.bytes), "num"), cell(count(u.sessions), "num"), cell(count(u.runs), "num")));
    rows("tenants-table", usage.tenants || [], "No tenant holds anything.", (t) => el("tr", {},
      cell(t.id, "id"), cell(bytes(t.bytes), "num"), cell(count(t.sessions), "num"), cell(count(t.runs), "num")));
    rows("keys-table", keys, "No service key.", (k) => el("tr", {},
      cell(k.name), cell(count(k.calls), "num"), cell(count(k.runs), "num"),
      cell(count(k.rate_limited), k.rate_limited ? "num warn" : "num"), cell(setting("limits", k.limits || {}) || "none")));
  }

  // A setting as an operator reads it: sizes in bytes, times in seconds, lists and maps flat.
  function setting(name, value) {
    if (value === null || value === undefined) return "unset";
    if (typeof value === "boolean") return value ? "yes" : "no";
    if (Array.isArray(value)) return value.join(", ") || "none";
    if (typeof value === "object") {
      return Object.entries(value).map(([k, v]) => `${k.replaceAll("_", " ")} ${setting(k, v)}`).join(", ");
    }
    if (value === 0 && /^max_/.test(name)) return "none"; // a quota of 0 is no quota
    if (typeof value === "number" && /bytes/.test(name)) return bytes(value);
    if (typeof value === "number" && /seconds/.test(name)) return seconds(value);
    return String(value);
  }

  function showSettings(settings) {
    $("settings-list").replaceChildren(...Object.entries(settings).map(([name, value]) =>
      el("div", {}, el("dt", {}, name.replaceAll("_", " ")), el("dd", {}, setting(name, value)))));
  }

  // --- starting ---

  $("login").addEventListener("submit", (event) => {
    event.preventDefault();
    const given = $("key").value.trim();
    if (given) useKey(given);
  });
  $("forget").addEventListener("click", () => askForKey(""));
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible") refresh();
    else clearTimeout(timer);
  });
  let resized = 0;
  window.addEventListener("resize", () => {
    clearTimeout(resized);
    resized = setTimeout(() => last && showRuns(last.minutes || [], last.at), 150);
  });

  if (key) useKey(key);
  else askForKey("");
})();
