// crossfeed's inspector page: the recent turns of the server, live. No library, no build step.
// Every text from a turn is put in the page with textContent, never as markup.
"use strict";

const state = { key: "", turns: new Map(), selected: null, detail: null, feed: null, limits: null };
const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null) continue;
    if (name === "text") node.textContent = String(value);
    else if (name === "onclick") node.addEventListener("click", value);
    else node.setAttribute(name, String(value));
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

function ms(value) {
  return value === null || value === undefined ? "–" : `${Number(value).toFixed(1)} ms`;
}

async function api(path) {
  const answer = await fetch(path, { headers: { Authorization: `Bearer ${state.key}` }, cache: "no-store" });
  if (answer.status === 401) throw new Error("the admin key was refused (401)");
  if (!answer.ok) throw new Error(`${path}: ${answer.status}`);
  return answer;
}

function setStatus(text, cls) {
  const node = $("status");
  node.textContent = text;
  node.className = cls;
}

// -- the list of turns, grouped by session ------------------------------------------------------

function sessionOf(turn) {
  return turn.session || `turn ${turn.id}`;
}

function renderList() {
  const nav = $("sessions");
  nav.replaceChildren();
  const groups = new Map();
  for (const turn of [...state.turns.values()].reverse()) {
    const name = sessionOf(turn);
    if (!groups.has(name)) groups.set(name, []);
    groups.get(name).push(turn);
  }
  if (!groups.size) nav.append(el("p", { class: "hint", text: "No turns yet: they appear here as they happen." }));
  for (const [name, turns] of groups) {
    const list = el("ul");
    for (const turn of turns) {
      const ending = turn.ending || "streaming";
      const row = el(
        "li",
        {
          class: `turn ${turn.id === state.selected ? "selected" : ""} ${turn.ending ? "" : "open"}`,
          "data-id": turn.id,
          "data-ending": ending,
          onclick: () => select(turn.id),
        },
        el("span", { class: "when", text: turn.started.slice(11, 19) }),
        el("span", { class: "what", text: `${turn.transport} · ${turn.model || "?"} → ${turn.upstream}` }),
        el("span", { class: `ending ${ending === "ok" ? "ok" : ending === "streaming" ? "live" : "bad"}`, text: ending }),
        turn.quirks ? el("span", { class: "badge quirk-badge", text: `${turn.quirks} quirk${turn.quirks > 1 ? "s" : ""}` }) : null,
      );
      list.append(row);
    }
    nav.append(el("details", { open: "", class: "session", "data-session": name }, el("summary", { text: name }), list));
  }
}

// -- one turn -----------------------------------------------------------------------------------

async function select(id) {
  state.selected = id;
  renderList();
  try {
    state.detail = await (await api(`/inspector/api/turns/${encodeURIComponent(id)}`)).json();
  } catch (err) {
    $("detail").replaceChildren(el("p", { class: "error", text: String(err.message || err) }));
    return;
  }
  renderDetail();
}

function pre(value, cls) {
  const text = typeof value === "string" ? value : JSON.stringify(value, null, 2);
  return el("pre", { class: cls || "", text: text === undefined ? "(none)" : text });
}

function streamRow(kind, item) {
  const cells = [el("td", { class: "t", text: ms(item.t) })];
  if (kind === "chunk") {
    cells.push(el("td", { class: "chunk" }, el("span", { class: "leg", text: `leg ${item.leg}` }), pre(item.data)));
    cells.push(el("td"));
  } else if (kind === "event") {
    cells.push(el("td"), el("td", { class: "event" }, pre(item.data)));
  } else if (kind === "tool") {
    cells.push(el("td", { class: "tool", colspan: "2", text: `hosted tool ran: ${item.name}(${item.arguments}) in ${ms(item.ms)} → ${item.result}` }));
  } else {
    const where = item.read ? `leg ${item.leg}, read ${item.read}` : `leg ${item.leg}, at the end`;
    cells.push(el("td", { class: "quirk", colspan: "2", text: `repaired: ${item.kind} ×${item.count} (${where})` }));
  }
  return el("tr", { class: `row-${kind}` }, ...cells);
}

function renderDetail() {
  const d = state.detail;
  const t = d.timings;
  const head = el(
    "div",
    { class: "head" },
    el("h2", { text: `${d.transport} turn ${d.request_id}` }),
    el("p", { text: `${d.model} → ${d.upstream} ${d.path} · ${d.stream === false ? "stream false · " : ""}${d.ending || "streaming"}${d.response_id ? " · " + d.response_id : ""}` }),
    el("button", { id: "save-case", type: "button", onclick: saveCase, text: "Save as test case" }),
  );
  const timings = el(
    "dl",
    { class: "timings" },
    el("dt", { text: "request sent to the backend" }), el("dd", { text: ms(t.upstream_sent_ms) }),
    el("dt", { text: "backend's first byte" }), el("dd", { text: ms(t.backend_first_byte_ms) }),
    el("dt", { text: "first event to the client" }), el("dd", { text: ms(t.first_event_ms) }),
    el("dt", { text: "crossfeed added" }), el("dd", { id: "added", text: ms(t.crossfeed_added_ms) }),
    el("dt", { text: "end" }), el("dd", { text: ms(t.end_ms) }),
  );
  const changes = el("table", { class: "changes" }, el("tr", {}, el("th", { text: "field" }), el("th", { text: "change" }), el("th", { text: "detail" })));
  for (const c of d.changes) {
    changes.append(el("tr", { class: `change-${c.change}` }, el("td", { text: c.field }), el("td", { text: c.change }), el("td", { text: c.detail })));
  }
  const requests = el(
    "div",
    { class: "side-by-side" },
    el("div", {}, el("h3", { text: "the client's request" }), pre(d.client_request, "body client-body")),
    el("div", {}, el("h3", { text: "sent to the backend" }), pre(d.upstream_request, "body upstream-body")),
  );
  const rows = [];
  for (const c of d.chunks) rows.push(["chunk", c]);
  for (const e of d.events) rows.push(["event", e]);
  for (const q of d.quirk_marks) rows.push(["quirk", q]);
  for (const r of d.tool_runs) rows.push(["tool", r]);
  rows.sort((a, b) => a[1].t - b[1].t);
  const stream = el(
    "table",
    { id: "stream", class: "stream" },
    el("tr", {}, el("th", { text: "time" }), el("th", { text: "the backend's chunks" }), el("th", { text: "events to the client" })),
  );
  for (const [kind, item] of rows) stream.append(streamRow(kind, item));
  const legs = el("ul", { class: "legs" });
  for (const leg of d.leg_calls) legs.append(el("li", { text: `leg ${leg.index}: ${leg.status} ${leg.url} (answered at ${ms(leg.at)})` }));
  const dropped = d.dropped_bytes ? el("p", { class: "hint", text: `${d.dropped_bytes} bytes past the turn's limit were counted, not kept.` }) : null;
  $("detail").replaceChildren(
    head, timings,
    el("h3", { text: "backend calls" }), legs,
    el("h3", { text: "stream: the backend's reads beside the events sent, in time" }), stream, dropped || "",
    el("h3", { text: "what changed" }), changes, requests,
  );
}

function showHeld(held) {
  const limits = state.limits;
  if (!limits) return;
  const turns = Math.min(state.turns.size || limits.turns.length, limits.max_turns);
  $("held").textContent = `${turns}/${limits.max_turns} turns kept, ${(held / 1024).toFixed(0)} KiB of ${(limits.bound_bytes / 1048576).toFixed(1)} MiB`;
}

async function saveCase() {
  const d = state.detail;
  const answer = await api(`/inspector/api/turns/${encodeURIComponent(d.id)}/case`);
  const blob = await answer.blob();
  const name = (answer.headers.get("Content-Disposition") || "").match(/filename="([^"]+)"/);
  const link = el("a", { href: URL.createObjectURL(blob), download: name ? name[1] : "crossfeed-case.json" });
  document.body.append(link);
  link.click();
  link.remove();
}

// -- live ---------------------------------------------------------------------------------------

function onMessage(msg) {
  if (msg.kind === "hello") {
    state.turns.clear();
    for (const turn of msg.turns) state.turns.set(turn.id, turn);
    renderList();
    return;
  }
  if (msg.kind === "turn") {
    state.turns.set(msg.turn.id, msg.turn);
    if (msg.held_bytes !== undefined) showHeld(msg.held_bytes);
    renderList();
    if (state.detail && msg.turn.id === state.detail.id) {
      Object.assign(state.detail, msg.turn);
      if (msg.turn.ending) select(msg.turn.id); // the whole turn, once it is over
    }
    return;
  }
  const d = state.detail;
  if (!d || msg.turn !== d.id) return;
  const stream = $("stream");
  if (msg.kind === "chunk") { d.chunks.push(msg); stream && stream.append(streamRow("chunk", msg)); }
  else if (msg.kind === "event") { d.events.push(msg); stream && stream.append(streamRow("event", msg)); }
  else if (msg.kind === "tool") { d.tool_runs.push(msg.tool); stream && stream.append(streamRow("tool", msg.tool)); }
  else if (msg.kind === "quirk") { d.quirk_marks.push(msg.quirk); stream && stream.append(streamRow("quirk", msg.quirk)); }
}

async function follow() {
  const feed = new AbortController();
  state.feed = feed;
  while (state.feed === feed) {
    try {
      const answer = await fetch("/inspector/api/live", { headers: { Authorization: `Bearer ${state.key}` }, signal: feed.signal });
      if (answer.status === 401) { setStatus("admin key refused (401)", "bad"); return; }
      if (!answer.ok) throw new Error(String(answer.status));
      setStatus("live", "live");
      const reader = answer.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const frame = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          for (const line of frame.split("\n")) if (line.startsWith("data: ")) onMessage(JSON.parse(line.slice(6)));
        }
      }
    } catch (err) {
      if (feed.signal.aborted) return;
    }
    setStatus("reconnecting…", "off");
    await new Promise((done) => setTimeout(done, 1000));
  }
}

async function connect(event) {
  event.preventDefault();
  state.key = $("key").value.trim();
  sessionStorage.setItem("crossfeed-inspector-key", state.key);
  if (state.feed) state.feed.abort();
  try {
    const list = await (await api("/inspector/api/turns")).json();
    state.limits = list;
    showHeld(list.held_bytes);
  } catch (err) {
    setStatus(String(err.message || err), "bad");
    return;
  }
  follow();
}

$("login").addEventListener("submit", connect);
const saved = sessionStorage.getItem("crossfeed-inspector-key");
if (saved) { $("key").value = saved; $("connect").click(); }
