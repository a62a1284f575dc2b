// The studio: a single page over the JSON API under /api (see API.md next
// to the crate). Hash routes: #/graphs, #/graphs/<name>, #/threads,
// #/threads/<graph>/<thread>, #/journal, #/agent-graphs,
// #/agent-graphs/<id>.
//
// The token comes from the "Token" form or the URL fragment #token=...
// (removed from the address bar at once), lives in sessionStorage and
// goes out as `Authorization: Bearer` on every request. State-changing
// requests are POSTs with a JSON body and `X-Sandgraph-Studio: 1`.
// Everything the server sends is rendered as text (textContent,
// createTextNode, setAttribute), never as HTML.

import { drawGraph } from "./graph.js";

const TOKEN_KEY = "sandgraph-studio-token";
const AGENT_REFRESH_MS = 2000;
const HISTORY_LIMIT = 50;
const JOURNAL_LIMIT = 100;
// Drawings wider than this (px) are placed above the page's two columns.
const WIDE_DRAWING = 700;

const main = document.getElementById("app");
let session = null;
// Run when the page changes: abort streams, stop timers.
let cleanups = [];
// Bumped per render: a slow answer for a page left meanwhile is dropped.
let renderSeq = 0;
// A message to show once on the next render of a page (after a fork...).
let pendingNotice = null;

// ---------------------------------------------------------------- DOM

function h(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value == null || value === false) continue;
    if (key === "text") node.textContent = String(value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child == null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function json(value) {
  return JSON.stringify(value, null, 2) ?? "null";
}

function compact(value) {
  if (value == null) return "—";
  if (typeof value === "string") return value;
  if (typeof value === "number" || typeof value === "boolean") return String(value);
  return JSON.stringify(value);
}

function when(value) {
  if (value == null || value === "") return "—";
  const date = typeof value === "number" ? new Date(value > 1e12 ? value : value * 1000) : new Date(value);
  return Number.isNaN(date.getTime()) ? String(value) : date.toLocaleString();
}

function section(title, ...children) {
  return h("section", { "aria-label": title }, h("h3", { text: title }), ...children);
}

function alertBox(id, text) {
  return h("div", { id, role: "alert", class: "error", text });
}

function enc(part) {
  return encodeURIComponent(String(part));
}

// A table of `rows` (objects) with `columns` ([key, heading]); values that
// are not text are shown as compact JSON.
function dataTable(caption, rows, columns) {
  const cols = columns ?? [...new Set(rows.flatMap((r) => Object.keys(r ?? {})))].map((k) => [k, k]);
  const head = h("tr", {}, cols.map(([, title]) => h("th", { scope: "col", text: title })));
  const body = rows.map((row) =>
    h("tr", {}, cols.map(([key]) => {
      const value = typeof key === "function" ? key(row) : row?.[key];
      return h("td", {}, value instanceof Node ? value : cellText(value));
    })));
  return h("table", {}, h("caption", { text: caption }), h("thead", {}, head), h("tbody", {}, body));
}

function cellText(value) {
  const text = compact(value);
  if (text.length <= 160) return text;
  return h("details", {}, h("summary", { text: text.slice(0, 100) + "…" }), h("pre", { text: json(value) }));
}

// ---------------------------------------------------------------- API

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function headers(body) {
  const out = {};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) out.Authorization = `Bearer ${token}`;
  if (body !== undefined) {
    out["Content-Type"] = "application/json";
    out["X-Sandgraph-Studio"] = "1";
  }
  return out;
}

async function errorOf(resp) {
  const text = await resp.text().catch(() => "");
  let code = `http_${resp.status}`;
  let message = text.trim() || resp.statusText || "request failed";
  try {
    const parsed = JSON.parse(text);
    if (parsed && parsed.error) {
      code = String(parsed.error.code ?? code);
      message = String(parsed.error.message ?? message);
    }
  } catch {
    // Not JSON: the text is the message (the server's 401 is plain text).
  }
  return new ApiError(resp.status, code, message);
}

async function request(path, { method = "GET", body, signal } = {}) {
  try {
    return await fetch(path, {
      method,
      headers: headers(body),
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
      credentials: "same-origin",
      signal,
    });
  } catch (e) {
    if (e.name === "AbortError") throw e;
    throw new ApiError(0, "network", `cannot reach the server: ${e.message}`);
  }
}

async function api(path, options = {}) {
  const resp = await request(path, options);
  if (!resp.ok) {
    const err = await errorOf(resp);
    if (err.status === 401) showLogin(err.message);
    throw err;
  }
  if (resp.status === 204) return null;
  const text = await resp.text();
  return text ? JSON.parse(text) : null;
}

function post(path, body) {
  return api(path, { method: "POST", body: body ?? {} });
}

// POSTs `body` and calls onEvent with each line of the NDJSON answer, up
// to the first line for which onEvent returns true (the final one).
async function stream(path, body, onEvent, signal) {
  const resp = await request(path, { method: "POST", body, signal });
  if (!resp.ok) {
    const err = await errorOf(resp);
    if (err.status === 401) showLogin(err.message);
    throw err;
  }
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  // True once a final line was handled.
  const flush = (end) => {
    let at;
    while ((at = buffer.indexOf("\n")) >= 0 || (end && buffer.trim())) {
      const line = at >= 0 ? buffer.slice(0, at) : buffer;
      buffer = at >= 0 ? buffer.slice(at + 1) : "";
      if (line.trim() && onEvent(JSON.parse(line))) return true;
    }
    return false;
  };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    if (flush(false)) {
      reader.cancel().catch(() => {});
      return;
    }
  }
  buffer += decoder.decode();
  flush(true);
}

// ---------------------------------------------------------------- connecting

function takeTokenFromUrl() {
  const match = /^#token=([^&]*)(?:&(.*))?$/.exec(location.hash);
  if (!match) return;
  let token = match[1];
  try {
    token = decodeURIComponent(token);
  } catch {
    // Not percent-encoded: taken as written.
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  const rest = match[2] && match[2].startsWith("/") ? `#${match[2]}` : "#/graphs";
  history.replaceState(null, "", `${location.pathname}${location.search}${rest}`);
}

function setChrome(connected) {
  document.getElementById("nav").hidden = !connected;
  document.getElementById("disconnect").hidden = !connected;
  const who = document.getElementById("who");
  who.hidden = !connected;
  who.textContent = connected && session ? `signed in as ${session.principal} · sandgraph ${session.version}` : "";
}

function showLogin(message) {
  runCleanups();
  session = null;
  setChrome(false);
  document.title = "Connect · sandgraph studio";
  const input = h("input", { id: "token", type: "password", autocomplete: "off", required: true });
  const form = h("form", { "aria-label": "connect", class: "login" },
    h("label", { for: "token", text: "Token" }), input,
    h("button", { type: "submit", text: "Connect" }));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, input.value);
    connect();
  });
  main.replaceChildren(...[
    h("h1", { text: "Connect to the studio" }),
    message == null ? null : h("div", { id: "auth-error", role: "alert", class: "error", text: `unauthorized: ${message}` }),
    h("p", { text: "The server asks for the bearer token its MCP clients use." }),
    form,
  ].filter((c) => c != null));
  input.focus();
}

async function connect() {
  try {
    session = await api("/api/session");
  } catch (e) {
    if (e.status !== 401) {
      setChrome(false);
      main.replaceChildren(h("h1", { text: "sandgraph studio" }), alertBox("fatal", `${e.code}: ${e.message}`));
    }
    return;
  }
  setChrome(true);
  if (!location.hash.startsWith("#/")) history.replaceState(null, "", "#/graphs");
  await render(false);
}

function disconnect() {
  sessionStorage.removeItem(TOKEN_KEY);
  showLogin(null);
}

// ---------------------------------------------------------------- routing

function runCleanups() {
  for (const fn of cleanups.splice(0)) {
    try {
      fn();
    } catch {
      // A cleanup that fails leaves nothing worse behind.
    }
  }
}

function parseRoute() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean).map((p) => {
    try {
      return decodeURIComponent(p);
    } catch {
      return p;
    }
  });
  return parts;
}

const PAGES = {
  graphs: (rest) => (rest.length ? graphPage(rest[0]) : graphsPage()),
  threads: (rest) => (rest.length >= 2 ? threadPage(rest[0], rest.slice(1).join("/")) : threadsPage()),
  journal: () => journalPage(),
  "agent-graphs": (rest) => (rest.length ? agentGraphPage(rest[0]) : agentGraphsPage()),
};

async function render(focus) {
  if (!session) return;
  runCleanups();
  const seq = ++renderSeq;
  const [page, ...rest] = parseRoute();
  const builder = PAGES[page];
  for (const link of document.querySelectorAll("#nav a")) {
    const current = link.getAttribute("href") === `#/${page}`;
    if (current) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  main.setAttribute("aria-busy", "true");
  let content;
  try {
    content = builder ? await builder(rest) : [h("h1", { text: "Not found" }), h("p", { text: "No such page." })];
  } catch (e) {
    if (e.status === 401 || seq !== renderSeq) return;
    const title = e.status === 404 ? "Not found" : "Something went wrong";
    content = [h("h1", { text: title }), alertBox("page-error", `${e.code ?? "error"}: ${e.message}`)];
  }
  if (seq !== renderSeq) return;
  main.removeAttribute("aria-busy");
  main.replaceChildren(...[content].flat().filter((c) => c != null));
  const heading = main.querySelector("h1");
  if (heading) document.title = `${heading.textContent} · sandgraph studio`;
  if (focus && heading) {
    heading.setAttribute("tabindex", "-1");
    heading.focus();
  }
}

function takeNotice() {
  const text = pendingNotice;
  pendingNotice = null;
  return text ? h("p", { id: "notice", role: "status", class: "notice", text }) : null;
}

// ---------------------------------------------------------------- graphs

async function graphsPage() {
  const { graphs = [] } = await api("/api/graphs");
  const items = graphs.map((g) =>
    h("li", { "data-graph": g.name, class: "graph-card" },
      h("h2", {}, h("a", { href: `#/graphs/${enc(g.name)}`, text: g.name })),
      h("p", { text: g.description || "No description." }),
      h("p", { class: "meta" },
        g.as_tool ? "listed as an MCP tool" : "not listed as a tool",
        g.digest ? ` · sha256 ${String(g.digest).slice(0, 12)}…` : "")));
  return [
    h("h1", { text: "Graphs" }),
    h("p", { text: `${graphs.length} graph${graphs.length === 1 ? "" : "s"} mounted.` }),
    items.length ? h("ul", { class: "graph-list" }, items) : h("p", { text: "No graphs are mounted." }),
  ];
}

async function graphPage(name) {
  const g = await api(`/api/graphs/${enc(name)}`);
  const drawing = drawGraph(g.drawing ?? {}, g.name);
  const run = runForm(g, drawing);
  const caps = g.capabilities ?? {};
  const drawingSection = section("Drawing", h("figure", { class: "drawing" }, drawing.svg,
    h("figcaption", {}, legend())),
  h("details", { class: "drawing-text" }, h("summary", { text: "The drawing as text" }), drawing.text));
  // A drawing wider than the left column gets the page's whole width.
  const wide = drawing.width > WIDE_DRAWING;
  return [
    h("h1", { text: g.name }),
    h("p", { class: "description", text: g.description || "No description." }),
    wide ? drawingSection : null,
    h("div", { class: "graph-layout" },
      h("div", { class: "graph-main" },
        wide ? null : drawingSection,
        section("Run output", run.view.root)),
      h("div", { class: "graph-side" },
        section("Run", run.form),
        section("Parameters", schemaTable(g.parameters)),
        section("Capabilities",
          h("h4", { text: "Imported" }), list(caps.imported, "none"),
          h("h4", { text: "Granted" }), list(caps.granted, "none")),
        section("Digest", h("p", {}, g.digest ? h("code", { id: "digest", text: g.digest }) : "not mounted from bytes")))),
  ];
}

function legend() {
  return h("ul", { class: "legend", "aria-label": "legend" },
    h("li", { class: "l-static", text: "solid: static edge" }),
    h("li", { class: "l-conditional", text: "dashed: conditional edge (labelled) or Command goto target" }),
    h("li", { class: "l-send", text: "dotted: Send target" }),
    h("li", { class: "l-join", text: "◆ join: all sources first" }));
}

function list(items, empty) {
  if (!Array.isArray(items) || !items.length) return h("p", { text: empty });
  return h("ul", {}, items.map((i) => h("li", {}, h("code", { text: compact(i) }))));
}

function typeText(schema) {
  if (!schema || typeof schema !== "object") return "any JSON";
  if (Array.isArray(schema.enum)) return `one of ${schema.enum.map(compact).join(", ")}`;
  if ("const" in schema) return `exactly ${compact(schema.const)}`;
  for (const key of ["oneOf", "anyOf"]) {
    if (Array.isArray(schema[key])) return schema[key].map(typeText).join(" or ");
  }
  const type = Array.isArray(schema.type) ? schema.type.join(" or ") : schema.type;
  if (type === "array") return `array of ${typeText(schema.items)}`;
  if (type === "object" && schema.properties) return `object {${Object.keys(schema.properties).join(", ")}}`;
  return type ?? "any JSON";
}

function schemaTable(schema) {
  const props = Object.entries(schema?.properties ?? {});
  if (!props.length) return h("p", { text: "No parameters." });
  const required = new Set(schema?.required ?? []);
  const rows = props.map(([key, prop]) => ({ key, prop }));
  return dataTable("Arguments of a run", rows, [
    [(r) => h("code", { text: r.key }), "Name"],
    [(r) => typeText(r.prop), "Type"],
    [(r) => (required.has(r.key) ? "required" : "optional"), "Required"],
    [(r) => ("default" in (r.prop ?? {}) ? compact(r.prop.default) : "—"), "Default"],
    [(r) => r.prop?.description ?? "", "Description"],
  ]);
}

// ---------------------------------------------------------------- the run form

function fieldKind(prop) {
  if (!prop || typeof prop !== "object") return "json";
  if (Array.isArray(prop.enum) && prop.enum.length && prop.enum.every((v) => ["string", "number", "boolean"].includes(typeof v))) return "enum";
  const types = (Array.isArray(prop.type) ? prop.type : [prop.type]).filter((t) => t && t !== "null");
  if (types.length !== 1) return "json";
  return ["string", "integer", "number", "boolean"].includes(types[0]) ? types[0] : "json";
}

function fieldId(key) {
  return `param-${String(key).replace(/\s/g, "_")}`;
}

// One labelled control for the parameter `key`, and how to read it: a
// value, or undefined when an optional field is left empty.
function paramField(key, prop, isRequired, fallbackInput) {
  const id = fieldId(key);
  const kind = fieldKind(prop);
  const hint = prop?.description ? h("small", { id: `${id}-hint`, text: prop.description }) : null;
  const common = { id, name: key, "aria-describedby": hint ? `${id}-hint` : null, required: isRequired && kind !== "boolean" };
  let control;
  let read;
  if (kind === "enum") {
    const values = prop.enum;
    control = h("select", common,
      isRequired && "default" in prop ? null : h("option", { value: "", text: isRequired ? "(choose)" : "(not set)" }),
      values.map((v, i) => h("option", { value: typeof v === "string" ? v : `#${i}`, text: compact(v), selected: "default" in prop && prop.default === v })));
    read = () => (control.value === "" ? undefined : values[control.selectedIndex - (control.options[0].value === "" ? 1 : 0)]);
  } else if (kind === "boolean" && isRequired) {
    control = h("input", { ...common, type: "checkbox", checked: prop.default === true });
    read = () => control.checked;
  } else if (kind === "boolean") {
    control = h("select", common, ["", "true", "false"].map((v) => h("option", { value: v, text: v || "(not set)" })));
    read = () => (control.value === "" ? undefined : control.value === "true");
  } else if (kind === "json") {
    control = h("textarea", { ...common, rows: fallbackInput ? 5 : 2, spellcheck: "false", class: "json" });
    control.value = fallbackInput ? "{}" : "";
    read = () => readJson(control.value, key);
  } else {
    const numeric = kind !== "string";
    control = h("input", { ...common, type: numeric ? "number" : "text", step: kind === "integer" ? "1" : numeric ? "any" : null, placeholder: "default" in (prop ?? {}) ? compact(prop.default) : null });
    read = () => readScalar(control.value, kind, key, isRequired);
  }
  const label = h("label", { for: id }, h("code", { text: key }), kind === "json" ? " (JSON)" : "", isRequired ? " (required)" : "");
  return { row: h("div", { class: `field field-${kind}` }, label, control, hint), read, key };
}

function readJson(text, key) {
  if (!text.trim()) return undefined;
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new Error(`${key} is not valid JSON: ${e.message}`);
  }
}

function readScalar(text, kind, key, isRequired) {
  if (text === "") return isRequired && kind === "string" ? "" : undefined;
  if (kind === "string") return text;
  const number = Number(text);
  if (!Number.isFinite(number) || (kind === "integer" && !Number.isInteger(number))) {
    throw new Error(`${key} must be ${kind === "integer" ? "an integer" : "a number"}`);
  }
  return number;
}

// The run form of graph `g` and the live view its runs show in.
function runForm(g, drawing) {
  const schema = g.parameters ?? {};
  const required = new Set(schema.required ?? []);
  const props = Object.entries(schema.properties ?? {});
  const fallback = props.length === 1 && props[0][0] === "input" && fieldKind(props[0][1]) === "json";
  const fields = props.map(([key, prop]) => paramField(key, prop, required.has(key), fallback));
  const thread = h("input", { id: "run-thread", type: "text", autocomplete: "off", "aria-describedby": "run-thread-hint" });
  const configurable = h("textarea", { id: "run-configurable", rows: 2, spellcheck: "false", class: "json" });
  const runButton = h("button", { type: "submit", text: "Run" });
  const cancelButton = h("button", { type: "button", text: "Cancel", disabled: true });
  const form = h("form", { "aria-label": `run ${g.name}`, class: "run-form" },
    fields.length ? h("fieldset", {}, h("legend", { text: "Arguments" }), fields.map((f) => f.row)) : h("p", { text: "This graph takes no arguments." }),
    h("div", { class: "field" }, h("label", { for: "run-thread", text: "Thread" }), thread,
      h("small", { id: "run-thread-hint", text: "Optional: a thread name keeps the run's checkpoints, to resume, inspect and fork." })),
    h("details", {}, h("summary", { text: "Configurable (JSON, optional)" }),
      h("div", { class: "field" }, h("label", { for: "run-configurable", text: "Configurable" }), configurable)),
    h("div", { class: "buttons" }, runButton, cancelButton));
  const view = new RunView("", drawing, g.name, null, "No run yet.");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    let body;
    try {
      const input = {};
      for (const f of fields) {
        const value = f.read();
        if (value !== undefined) input[f.key] = value;
      }
      body = { input, thread: thread.value.trim() || null, configurable: readJson(configurable.value, "configurable") ?? null };
    } catch (e) {
      view.fail("invalid_form", e.message);
      return;
    }
    view.start(`/api/graphs/${enc(g.name)}/runs`, body, { runButton, cancelButton });
  });
  cancelButton.addEventListener("click", () => view.cancel());
  return { form, view };
}

// ---------------------------------------------------------------- a live run

// The live view of a run's NDJSON stream: a status line, the step log and
// the outcome. `prefix` keeps the ids of two views apart ("" on the graph
// page: #steps, #result, #run-error; "resume-" on a thread page). One run
// at a time: starting another closes the stream of the one before, whose
// late events are then ignored.
class RunView {
  constructor(prefix, drawing, graphName, onFinal, idle) {
    this.prefix = prefix;
    this.drawing = drawing;
    this.graphName = graphName;
    this.onFinal = onFinal;
    this.status = h("p", { id: `${prefix}run-status`, class: "run-status", role: "status", text: idle });
    this.steps = h("ol", { id: `${prefix}steps`, class: "steps", "aria-label": "steps" });
    this.stepsHeading = h("h4", { text: "Steps", hidden: true });
    this.outcome = h("div", { id: `${prefix}outcome`, class: "outcome" });
    this.root = h("div", { class: "run-view" }, this.status, this.stepsHeading, this.steps, this.outcome);
    // The run being shown: {controller, id, finished, buttons}.
    this.current = null;
    cleanups.push(() => this.current?.controller.abort());
  }

  mark(id, state) {
    this.drawing?.setState(id, state);
  }

  clearRunning() {
    if (!this.drawing) return;
    for (const g of this.drawing.svg.querySelectorAll("g.node.running")) this.mark(g.getAttribute("data-node"), "");
  }

  fail(code, message) {
    this.outcome.replaceChildren(alertBox(`${this.prefix}run-error`, `${code}: ${message}`));
    this.status.textContent = `Failed: ${code}.`;
  }

  // Shows one line of `run`'s stream; true once it was the final one.
  onEvent(run, event) {
    if (run !== this.current) return true;
    switch (event?.type) {
      case "started":
        run.id = event.run_id ?? null;
        this.status.textContent = `Running (run ${run.id ?? "?"}).`;
        this.mark("__start__", "done");
        for (const id of event.entry ?? []) this.mark(id, "running");
        return false;
      case "step":
        this.onStep(event);
        return false;
      case "completed":
        this.clearRunning();
        this.mark("__end__", "done");
        this.status.textContent = "Completed.";
        this.outcome.replaceChildren(h("h4", { text: "Final state" }), h("pre", { id: `${this.prefix}result`, class: "json", text: json(event.state) }));
        break;
      case "interrupted":
        this.clearRunning();
        for (const i of event.interrupts ?? []) this.mark(i.node, "running");
        this.status.textContent = "Interrupted: waiting for an answer.";
        this.outcome.replaceChildren(interruptedBox(this.prefix, this.graphName, event));
        break;
      case "error":
        this.clearRunning();
        this.fail(event.code ?? "error", event.message ?? "");
        break;
      default:
        return false;
    }
    run.finished = true;
    return true;
  }

  onStep(event) {
    const updates = Array.isArray(event.updates) ? event.updates : [];
    for (const u of updates) this.mark(u.node, "done");
    for (const id of event.next ?? []) this.mark(id, "running");
    const names = updates.map((u) => u.node);
    this.steps.append(h("li", { "data-step": event.step },
      h("p", {}, h("strong", { text: `Step ${event.step}` }), `: ${names.length ? names.join(", ") : "no node"} done`,
        event.next?.length ? `; next ${event.next.join(", ")}` : ""),
      updates.map((u) => h("div", { class: "update" }, h("span", { class: "update-node", text: `${u.node} wrote` }), h("pre", { class: "json", text: json(u.update) })))));
  }

  setBusy(buttons, busy) {
    if (buttons.runButton) buttons.runButton.disabled = busy;
    if (buttons.cancelButton) buttons.cancelButton.disabled = !busy;
    this.root.setAttribute("aria-busy", busy ? "true" : "false");
  }

  // Streams the run POST `path` with `body` starts; `buttons` are the
  // form's Run and Cancel, disabled and enabled while it runs.
  async start(path, body, buttons = {}) {
    this.current?.controller.abort();
    const run = { controller: new AbortController(), id: null, finished: false };
    this.current = run;
    this.drawing?.reset();
    this.steps.replaceChildren();
    this.stepsHeading.hidden = false;
    this.outcome.replaceChildren();
    this.status.textContent = "Starting…";
    this.setBusy(buttons, true);
    try {
      await stream(path, body, (event) => this.onEvent(run, event), run.controller.signal);
      if (run === this.current && !run.finished) this.fail("stream_ended", "the run's stream ended without a result");
    } catch (e) {
      if (run !== this.current) return;
      if (e.name === "AbortError") {
        if (!run.finished) this.fail("cancelled", "the run was cancelled (its connection closed)");
      } else if (e.status !== 401) {
        this.fail(e.code ?? "error", e.message);
      }
    } finally {
      if (run === this.current) {
        this.current = null;
        this.setBusy(buttons, false);
        if (this.onFinal && run.finished) this.onFinal();
      }
    }
  }

  // Asks the server to cancel the run (its stream then ends with the
  // `cancelled` error line) and closes the stream if that line has not
  // come within 5 s or the request fails: closing cancels the run too.
  cancel() {
    const run = this.current;
    if (!run) return;
    this.status.textContent = "Cancelling…";
    const close = () => run.controller.abort();
    if (!run.id) {
      close();
      return;
    }
    setTimeout(close, 5000);
    post(`/api/runs/${enc(run.id)}/cancel`).catch(close);
  }
}

function interruptedBox(prefix, graphName, event) {
  const thread = event.thread ?? "";
  return h("div", { id: `${prefix}run-interrupted`, class: "interrupted" },
    h("p", {}, `Interrupted on thread `, h("code", { text: thread }), "."),
    (event.interrupts ?? []).map((i) =>
      h("div", { class: "interrupt" },
        h("p", { text: `${i.node ?? "a node"} asks:` }),
        h("pre", { class: "json", text: json(i.value) }))),
    thread ? h("p", {}, h("a", { href: `#/threads/${enc(graphName)}/${enc(thread)}`, text: "Answer it on the thread page" })) : null);
}

// ---------------------------------------------------------------- threads

async function threadsPage() {
  if (session.threads === false) {
    return [h("h1", { text: "Threads" }), h("p", { text: "This server keeps no threads: start it with --data to keep them." })];
  }
  const { threads = [] } = await api("/api/threads");
  const rows = threads.map((t) => ({ ...t }));
  return [
    h("h1", { text: "Threads" }),
    threads.length
      ? dataTable("Your threads, newest first", rows, [
        [(t) => h("a", { href: `#/threads/${enc(t.graph)}/${enc(t.thread)}`, "data-thread": t.thread, text: t.thread }), "Thread"],
        ["graph", "Graph"],
        [(t) => when(t.updated_at), "Updated"],
        ["checkpoints", "Checkpoints"],
        [(t) => (t.interrupted ? "interrupted: waiting for an answer" : "idle"), "Status"],
      ])
      : h("p", { text: "No threads yet. A run with a thread name keeps its checkpoints here." }),
  ];
}

async function threadPage(graph, thread) {
  const base = `/api/threads/${enc(graph)}/${enc(thread)}`;
  const [state, history] = await Promise.all([api(base), api(`${base}/history?limit=${HISTORY_LIMIT}`)]);
  const checkpoints = history?.checkpoints ?? [];
  return [
    h("h1", {}, "Thread ", h("code", { text: thread })),
    h("p", {}, "Graph ", h("a", { href: `#/graphs/${enc(graph)}`, text: graph })),
    takeNotice(),
    h("div", { class: "thread-layout" },
      h("div", { class: "thread-main" },
        section("Current state",
          h("p", { id: "thread-head" }, "Head checkpoint ", h("code", { text: state.checkpoint_id ?? "none" })),
          h("p", { id: "thread-next", text: state.next?.length ? `Next: ${state.next.join(", ")}` : "Next: nothing (the run ended)" }),
          h("pre", { id: "thread-state", class: "json", text: json(state.values ?? {}) })),
        interruptSection(graph, thread, base, state),
        updateSection(base, state)),
      section("History", historyList(base, state, checkpoints))),
  ];
}

function interruptSection(graph, thread, base, state) {
  const interrupts = state.interrupts ?? [];
  if (!interrupts.length) return section("Interrupt", h("p", { text: "No interrupt is waiting." }));
  const payload = interrupts.length === 1
    ? interrupts[0].value
    : Object.fromEntries(interrupts.map((i) => [i.id, { node: i.node, value: i.value }]));
  const answer = h("textarea", { id: "resume-value", rows: 2, spellcheck: "false", class: "json", "aria-describedby": "resume-hint", placeholder: interrupts.length === 1 ? '"yes"' : null });
  const resume = h("button", { type: "submit", text: "Resume" });
  const view = new RunView("resume-", null, graph, () => {
    pendingNotice = "Resumed: the thread below is as the run left it.";
    render(false);
  }, "");
  const form = h("form", { "aria-label": "resume", class: "resume-form" },
    h("div", { class: "field" }, h("label", { for: "resume-value", text: "Answer (JSON)" }), answer,
      h("small", {
        id: "resume-hint",
        text: interrupts.length === 1
          ? 'Any JSON value, e.g. "yes" with the quotes.'
          : "An object mapping each interrupt's id to its answer.",
      })),
    h("div", { class: "buttons" }, resume));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    let value;
    try {
      value = JSON.parse(answer.value);
    } catch (e) {
      view.fail("invalid_json", `the answer is not valid JSON: ${e.message}`);
      return;
    }
    view.start(`${base}/resume`, { value }, { runButton: resume });
  });
  return section("Interrupt",
    h("p", {}, `${interrupts.map((i) => i.node).join(", ")} asks (interrupted, waiting for an answer):`),
    h("pre", { id: "interrupt", class: "json", text: json(payload) }),
    form, view.root);
}

function updateSection(base, state) {
  const values = h("textarea", { id: "update-values", rows: 4, spellcheck: "false", class: "json", "aria-describedby": "update-hint" });
  values.value = "{}";
  const asNode = h("input", { id: "update-as-node", type: "text", autocomplete: "off" });
  const message = h("div", { class: "form-message" });
  const form = h("form", { "aria-label": "update state", class: "update-form" },
    h("div", { class: "field" }, h("label", { for: "update-values", text: "Values (JSON object)" }), values,
      h("small", { id: "update-hint", text: "Written through the channels' reducers as a new checkpoint." })),
    h("div", { class: "field" }, h("label", { for: "update-as-node", text: "As node (optional)" }), asNode),
    h("div", { class: "buttons" }, h("button", { type: "submit", text: "Update" })), message);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    let parsed;
    try {
      parsed = JSON.parse(values.value);
    } catch (e) {
      message.replaceChildren(alertBox("update-error", `invalid_json: the values are not valid JSON: ${e.message}`));
      return;
    }
    try {
      const head = await post(`${base}/state`, { values: parsed, as_node: asNode.value.trim() || null });
      pendingNotice = `Updated: the head is now ${head?.id ?? "a new checkpoint"}.`;
      render(false);
    } catch (e) {
      if (e.status !== 401) message.replaceChildren(alertBox("update-error", `${e.code}: ${e.message}`));
    }
  });
  return section("Update state", form);
}

function historyList(base, state, checkpoints) {
  if (!checkpoints.length) return h("p", { text: "No checkpoints." });
  const message = h("div", { class: "form-message" });
  const items = checkpoints.map((c) => {
    const isHead = c.id === state.checkpoint_id;
    const fork = h("button", { type: "button", text: "Fork", "aria-describedby": `cp-${c.id}` });
    fork.addEventListener("click", async () => {
      try {
        const head = await post(`${base}/fork`, { checkpoint_id: c.id });
        pendingNotice = `Forked from ${c.id}: the head is now ${head?.id ?? "a new checkpoint"}.`;
        render(false);
      } catch (e) {
        if (e.status !== 401) message.replaceChildren(alertBox("fork-error", `${e.code}: ${e.message}`));
      }
    });
    return h("li", { "data-checkpoint": c.id, "data-parent": c.parent_id ?? "", class: isHead ? "checkpoint head" : "checkpoint" },
      h("p", { class: "cp-line", id: `cp-${c.id}` },
        h("strong", { text: `Step ${c.step ?? "?"}` }), ` · ${c.source ?? "?"} · ${when(c.created_at)}`,
        isHead ? h("span", { class: "badge", text: " · head" }) : null),
      h("p", { class: "meta" }, "checkpoint ", h("code", { text: c.id }),
        c.parent_id ? [" · parent ", h("code", { text: c.parent_id })] : " · no parent",
        Array.isArray(c.next) ? ` · next: ${c.next.length ? c.next.join(", ") : "nothing"}` : ""),
      h("details", {}, h("summary", { text: "State" }), h("pre", { class: "json", text: json(c.values ?? {}) })),
      h("details", {}, h("summary", { text: `Writes (${writesCount(c.writes)})` }), h("pre", { class: "json", text: json(c.writes ?? []) })),
      fork);
  });
  return [h("p", { text: "Newest first. Fork makes a checkpoint the head again; the newer ones stay in the history." }),
    message, h("ol", { id: "history", class: "timeline" }, items)];
}

function writesCount(writes) {
  if (Array.isArray(writes)) return writes.length;
  if (writes && typeof writes === "object") return Object.keys(writes).length;
  return 0;
}

// ---------------------------------------------------------------- journal

async function journalPage() {
  if (session.journal === false) {
    return [h("h1", { text: "Journal" }), h("p", { text: "This server keeps no routing journal." })];
  }
  const { entries = [] } = await api(`/api/journal?limit=${JOURNAL_LIMIT}`);
  return [
    h("h1", { text: "Journal" }),
    entries.length
      ? journalTable(entries)
      : h("p", { text: "No routing attempts yet." }),
  ];
}

function journalTable(entries) {
  return dataTable(`Routing attempts, newest first (${entries.length})`, entries, [
    [(e) => when(e.at_ms), "When"],
    [(e) => cellText(e.request), "Request"],
    [(e) => (e.attempt != null ? String(e.attempt) : "—"), "Attempt"],
    [(e) => (e.tool ? h("code", { text: e.tool }) : "—"), "Graph"],
    [(e) => (e.stage ? `${e.decision} (${e.stage})` : compact(e.decision)), "Decision"],
    [(e) => cellText(e.reason), "Reason"],
    [(e) => timings(e), "Timings"],
    [(e) => cellText(e.outcome), "Outcome"],
  ]);
}

function timings(entry) {
  const parts = [["model", entry?.model_ms], ["check", entry?.check_ms], ["run", entry?.run_ms]]
    .filter(([, ms]) => ms != null)
    .map(([what, ms]) => `${what} ${ms} ms`);
  return parts.length ? parts.join(", ") : "—";
}

// ---------------------------------------------------------------- agent graphs

async function agentGraphsPage() {
  if (session.controller === false) {
    return [h("h1", { text: "Agent graphs" }), h("p", { text: "This server runs no controller: start it with --controller to see agent graphs." })];
  }
  const body = h("div", { id: "agent-graphs" });
  const refresh = async () => {
    const { graphs = [] } = await api("/api/agent-graphs");
    body.replaceChildren(graphs.length
      ? dataTable("Your agent graphs", graphs, [
        [(g) => h("a", { href: `#/agent-graphs/${enc(g.id)}`, "data-agent-graph": g.id, text: g.id }), "Id"],
        [(g) => (g.closed ? "closed" : "open"), "Status"],
        ["revision", "Revision"],
        ["work", "Work"],
        ["records", "Records"],
        ["wakes", "Wakes"],
      ])
      : h("p", { text: "No agent graphs yet. An MCP client with your token creates them with update_agent_graph." }), updatedLine());
  };
  await refresh();
  live(refresh, body);
  return [h("h1", { text: "Agent graphs" }), body];
}

async function agentGraphPage(id) {
  const body = h("div", { id: "agent-graph" });
  const refresh = async () => {
    const { view = {}, wakes = [] } = await api(`/api/agent-graphs/${enc(id)}`);
    body.replaceChildren(...[
      h("p", { id: "agent-graph-summary" },
        `${view.closed ? "Closed" : "Open"} · revision ${view.revision ?? "?"} · ${view.updateCount ?? "?"} updates`,
        view.finish ? ` · finished: ${view.finish.reason ?? ""}` : ""),
      section("Work", rowsOrNone(view.work, "work", [
        [(w) => h("code", { text: w.workId }), "Work"],
        [(w) => targetText(w.target), "Target"],
        [(w) => compact(w.status), "Status"],
        [(w) => cellText(w.instruction), "Instruction"],
        [(w) => (w.inputIds?.length ? w.inputIds.join(", ") : "—"), "Inputs"],
        [(w) => compact(w.replaces), "Replaces"],
      ])),
      section("Records", rowsOrNone(view.records, "records", [
        [(r) => h("code", { text: r.recordId }), "Record"],
        [(r) => compact(r.operatorId), "By"],
        [(r) => cellText(r.summary), "Summary"],
        [(r) => when(r.emittedAt), "Emitted"],
      ])),
      section("Wakes", rowsOrNone(wakes, "wakes", [
        [(w) => h("code", { text: w.wakeId }), "Wake"],
        [(w) => compact(w.status), "Status"],
        [(w) => compact(w.attemptCount), "Attempts"],
        [(w) => when(w.createdAt), "Created"],
        [(w) => when(w.updatedAt), "Updated"],
        [(w) => compact(w.failureReason ?? w.supersededReason), "Reason"],
      ])),
      view.stoppedTargets?.length ? section("Stopped", dataTable("Stopped targets", view.stoppedTargets)) : null,
      h("details", {}, h("summary", { text: "The whole view as JSON" }), h("pre", { class: "json", text: json(view) })),
      updatedLine(),
    ].filter((c) => c != null));
  };
  await refresh();
  live(refresh, body);
  return [h("h1", {}, "Agent graph ", h("code", { text: id })), h("p", {}, h("a", { href: "#/agent-graphs", text: "All agent graphs" })), body];
}

// A work item's target: `preset preset-a`, `graph research`, else JSON.
function targetText(target) {
  if (target && typeof target === "object" && typeof target.kind === "string") {
    const name = target.id ?? target.name ?? target.graph;
    return name == null ? target.kind : `${target.kind} ${compact(name)}`;
  }
  return compact(target);
}

function rowsOrNone(rows, what, columns) {
  if (!Array.isArray(rows) || !rows.length) return h("p", { text: `No ${what}.` });
  return dataTable(`${what[0].toUpperCase()}${what.slice(1)} (${rows.length})`, rows, columns);
}

function updatedLine() {
  return h("p", { class: "meta", text: `Refreshed every ${AGENT_REFRESH_MS / 1000} s; last at ${new Date().toLocaleTimeString()}.` });
}

// Re-runs `refresh` every AGENT_REFRESH_MS while the page is shown; a
// failure is shown above the data and retried.
function live(refresh, body) {
  let busy = false;
  const timer = setInterval(async () => {
    if (busy) return;
    busy = true;
    try {
      await refresh();
    } catch (e) {
      if (e.status !== 401) {
        body.querySelector("#refresh-error")?.remove();
        body.prepend(alertBox("refresh-error", `${e.code}: ${e.message}`));
      }
    } finally {
      busy = false;
    }
  }, AGENT_REFRESH_MS);
  cleanups.push(() => clearInterval(timer));
}

// ---------------------------------------------------------------- start

document.getElementById("disconnect").addEventListener("click", disconnect);
window.addEventListener("hashchange", () => {
  if (location.hash.startsWith("#token=")) {
    takeTokenFromUrl();
    connect();
    return;
  }
  render(true);
});
takeTokenFromUrl();
connect();
