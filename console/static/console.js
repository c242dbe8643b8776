"use strict";
// The console page: draws the server's view model (GET /api/view, or the event stream of
// /api/events when live), sends fault buttons (POST /api/fault, after a confirmation) and
// starts/stops the built-in workload (POST /api/workload), whose live verdict it shows.

const FAULTS = ["kill", "shutdown", "pause", "resume", "restart", "isolate"];
let live = true;
let t0 = null;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : String(c));
  return node;
}

function seconds(ms) {
  const origin = live ? (t0 === null ? ms : t0) : 0;
  return ((ms - origin) / 1000).toFixed(1) + " s";
}

function setCell(cell, ...children) {
  // Only a changed cell is redrawn: an unchanged one keeps its nodes.
  const text = children.map((c) => c instanceof Node ? c.outerHTML : String(c)).join("");
  if (cell.dataset.drawn === text) return;
  cell.dataset.drawn = text;
  cell.replaceChildren(...children);
}

function drawBrokers(v) {
  // Rows are updated in place, never rebuilt: the view arrives every second, and a fault
  // button replaced between a press and its release would lose the click (CI saw a test's
  // click land on a button just replaced: a stale element).
  const body = document.querySelector("#brokers tbody");
  const wanted = new Set();
  let order = 0;
  for (const b of v.brokers) {
    const id = `broker-${b.id}`;
    wanted.add(id);
    let row = document.getElementById(id);
    if (!row) {
      row = el("tr", {id}, el("td", {}, b.id), el("td", {class: "process"}), el("td"),
        el("td"), el("td"), el("td"), el("td", {class: "live-only"}));
    }
    if (body.rows[order] !== row) body.insertBefore(row, body.rows[order] || null);
    order += 1;
    row.className = b.process;
    row.dataset.process = b.process;
    row.dataset.registered = b.registered;
    row.dataset.controller = b.controller;
    const cells = row.cells;
    setCell(cells[1], b.process);
    setCell(cells[2], b.registered ? "registered" : "not registered");
    setCell(cells[3], ...(b.controller ? [el("span", {class: "badge"}, "controller")] : []));
    setCell(cells[4], b.leaderships);
    setCell(cells[5], [b.address, b.kafka_address ? "Kafka " + b.kafka_address : ""]
      .filter(Boolean).join("  "));
    const withButtons = live && v.faults_enabled;
    if (withButtons !== (cells[6].childElementCount > 0)) {
      cells[6].replaceChildren();
      for (const action of withButtons ? FAULTS : []) {
        const button = el("button", {"data-action": action, "data-broker": b.id,
          id: `fault-${action}-${b.id}`}, action);
        button.onclick = () => fault(action, b.id);
        cells[6].append(button);
      }
    }
  }
  for (const row of [...body.rows]) if (!wanted.has(row.id)) row.remove();
}

function drawTopics(v) {
  const root = document.getElementById("topics");
  root.replaceChildren();
  for (const topic of v.topics) {
    root.append(el("h3", {}, topic.name));
    for (const p of topic.partitions) {
      const cls = "partition" + (p.offline ? " offline" : "") +
        (p.under_replicated ? " under-replicated" : "");
      const head = el("div", {},
        `${topic.name}-${p.partition}  leader `, el("b", {class: "leader"}, p.leader),
        `  epoch ${p.leader_epoch}  replicas [${p.replicas}]  ISR [${p.isr}]` +
        (p.offline ? "  OFFLINE" : p.under_replicated ? "  under-replicated" : ""));
      const box = el("div", {class: cls, id: `part-${topic.name}-${p.partition}`,
        "data-leader": p.leader, "data-isr": p.isr.join(","), "data-epoch": p.leader_epoch}, head);
      const top = Math.max(p.max_leo, 1);
      for (const r of p.bars) {
        const bar = el("div", {class: "bar"});
        if (r.leo !== null) {
          bar.append(el("div", {class: "leo", style: `width:${100 * r.leo / top}%`}));
          bar.append(el("div", {class: "hw", style: `width:${100 * r.hw / top}%`}));
        }
        const who = `broker ${r.broker}${r.leader ? " (leader)" : ""}`;
        const nums = r.leo === null ? "no answer" : `HW ${r.hw}  LEO ${r.leo}`;
        box.append(el("div", {class: "bar-row" + (r.in_isr ? "" : " out-of-isr"),
          "data-broker": r.broker}, el("span", {class: "who"}, who), bar, el("span", {}, nums)));
      }
      root.append(box);
    }
  }
}

function drawCharts(v) {
  if (!live || typeof Plotly === "undefined") return;
  const through = [], latency = [];
  for (const [broker, s] of Object.entries(v.rates || {})) {
    const x = s.t.map((t) => new Date(t));
    through.push({x, y: s.produce, name: `broker ${broker} produce/s`, mode: "lines"});
    through.push({x, y: s.fetch, name: `broker ${broker} fetch/s`, mode: "lines",
      line: {dash: "dot"}});
    latency.push({x, y: s.latency, name: `broker ${broker} ms/request`, mode: "lines"});
  }
  const layout = (title) => ({title: {text: title}, margin: {t: 30, b: 30, l: 50, r: 10},
    xaxis: {type: "date"}, yaxis: {rangemode: "tozero"}});
  Plotly.react("chart-throughput", through, layout("requests/s"), {staticPlot: false});
  Plotly.react("chart-latency", latency, layout("mean request latency (ms)"));
}

function drawWorkload(v) {
  const select = document.getElementById("wl-topic");
  const names = v.topics.map((t) => t.name);
  if ([...select.options].map((o) => o.value).join() !== names.join()) {
    const chosen = select.value;
    select.replaceChildren(...names.map((n) => el("option", {value: n}, n)));
    if (names.includes(chosen)) select.value = chosen;
  }
  const w = v.workload;
  const status = document.getElementById("wl-status");
  const verdict = document.getElementById("wl-verdict");
  if (!w) { status.textContent = "no workload here"; return; }
  status.dataset.state = w.state;
  status.textContent = w.state === "idle" ? "idle" :
    `${w.state}: ${w.rate} records/s to ${w.topic}, acks=${w.acks}; ` +
    `${w.sent} sent, ${w.acknowledged} acknowledged, ${w.read} read`;
  verdict.dataset.verdict = w.verdict ? w.verdict.verdict : "";
  verdict.dataset.final = w.verdict ? w.verdict.final : "";
  verdict.className = w.verdict ? (w.verdict.ok ? "ok" : "bad") : "";
  verdict.textContent = w.verdict ? w.verdict.lines.join("\n") : "";
}

async function workload(body) {
  const answer = await fetch("/api/workload", {method: "POST",
    headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)});
  const reply = await answer.json();
  document.getElementById("wl-result").textContent = reply.message || reply.error;
}

function startWorkload() {
  workload({action: "start", topic: document.getElementById("wl-topic").value,
    rate: Number(document.getElementById("wl-rate").value),
    acks: document.getElementById("wl-acks").value,
    consumer: document.getElementById("wl-consumer").checked});
}

function drawGroups(v) {
  const root = document.getElementById("groups");
  root.replaceChildren();
  if (!v.groups.length) { root.append("none"); return; }
  for (const g of v.groups) {
    const rows = g.lag.map((l) => el("tr", {}, el("td", {}, `${l.topic}-${l.partition}`),
      el("td", {}, l.committed), el("td", {}, l.end), el("td", {}, l.lag)));
    const members = g.members.map((m) => `${m.id}: ${m.assignment.join(", ")}`).join("; ");
    root.append(el("div", {class: "group", id: `group-${g.group}`},
      el("b", {}, g.group), ` ${g.state}, lag ${g.total_lag}; members: ${members || "none"}`,
      el("table", {}, el("tr", {}, el("th", {}, "partition"), el("th", {}, "committed"),
        el("th", {}, "end"), el("th", {}, "lag")), ...rows)));
  }
}

function drawTimeline(v) {
  const list = document.getElementById("timeline");
  list.replaceChildren();
  for (const e of v.timeline.slice(0, 200)) {
    list.append(el("li", {class: e.kind, "data-kind": e.kind},
      el("span", {class: "t"}, seconds(e.time_ms)), e.text));
  }
}

function draw(v) {
  if (live && t0 === null && v.time_ms) t0 = v.time_ms;
  const s = v.summary || {};
  document.getElementById("summary").textContent = s.brokers === undefined ? "waiting" :
    `${s.brokers_up}/${s.brokers} brokers up, ${s.partitions} partitions, ` +
    `${s.under_replicated} under-replicated, ${s.offline} offline`;
  document.getElementById("error").textContent = v.error || "";
  if (live && v.time_ms) {
    const age = Date.now() - v.time_ms;
    const latency = document.getElementById("latency");
    latency.textContent = `view ${age} ms old`;
    latency.dataset.ageMs = age;
    document.body.dataset.updates = Number(document.body.dataset.updates || 0) + 1;
  }
  if (v.brokers) drawBrokers(v);
  if (v.topics) drawTopics(v);
  if (v.groups) drawGroups(v);
  if (v.timeline) drawTimeline(v);
  if (live && v.topics) drawWorkload(v);
  drawCharts(v);
  if (v.replay) {
    document.getElementById("replay-time").textContent =
      `${(v.replay.t_ms / 1000).toFixed(0)} s of ${(v.replay.end_ms / 1000).toFixed(0)} s`;
    document.body.dataset.replayT = v.replay.t_ms;
  }
}

async function fault(action, broker) {
  if (!window.confirm(`${action} broker ${broker}?`)) return;
  const answer = await fetch("/api/fault", {method: "POST",
    headers: {"Content-Type": "application/json"}, body: JSON.stringify({action, broker})});
  const body = await answer.json();
  document.getElementById("fault-result").textContent = body.message || body.error;
}

async function start() {
  const first = await (await fetch("/api/view")).json();
  live = !first.replay;
  document.getElementById("mode").textContent = live ? "live" : "replay";
  for (const node of document.querySelectorAll(".live-only")) node.hidden = !live;
  if (live) {
    document.getElementById("wl-start").onclick = startWorkload;
    document.getElementById("wl-stop").onclick = () => workload({action: "stop"});
    draw(first);
    const events = new EventSource("/api/events");
    events.onmessage = (m) => draw(JSON.parse(m.data));
    return;
  }
  const slider = document.getElementById("slider");
  document.getElementById("replay").hidden = false;
  slider.max = first.replay.end_ms;
  slider.step = first.replay.frame_ms;
  if (first.verdict) {
    document.getElementById("verdict").textContent = first.verdict.lines.join("\n");
  }
  draw(first);
  slider.oninput = async () => {
    draw(await (await fetch(`/api/view?t=${slider.value}`)).json());
  };
}

start();
