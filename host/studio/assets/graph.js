// The SVG drawing of a graph: a layered layout computed here from the
// API's drawing data ({nodes: [{id, label, description, kind}], edges:
// [{from, to, kind, label, join}]}), top to bottom from __start__ to
// __end__.
//
// Nodes are labelled boxes; static edges are solid, conditional edges
// dashed with their labels, declared goto targets dashed, Send targets
// dotted, and the sources of a join converge on a marked point above the
// joining node. Each node is a <g data-node="<id>"> with a <title> (its
// description and its run state, for hover) and a visible status line;
// setState() adds the `running` or `done` class and says so in text. Every
// string from the server goes in with textContent or setAttribute.

const SVG = "http://www.w3.org/2000/svg";
const NODE_H = 46;
const LAYER_GAP = 92;
const NODE_GAP = 36;
const MARGIN = 24;
const CHAR_W = 7.6;
const MAX_LABEL = 40;

function svgEl(tag, attrs = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) {
    node.setAttribute(key, String(value));
  }
  return node;
}

function shorten(text) {
  const s = String(text ?? "");
  return s.length > MAX_LABEL ? s.slice(0, MAX_LABEL - 1) + "…" : s;
}

// Depth-first from the start nodes: edges that close a cycle are back
// edges; layers come from the longest path over the others.
function layers(nodes, edges) {
  const out = new Map(nodes.map((n) => [n.id, []]));
  for (const e of edges) {
    if (out.has(e.from) && out.has(e.to)) out.get(e.from).push(e);
  }
  const back = new Set();
  const state = new Map();
  const order = [];
  const visit = (root) => {
    const stack = [[root, 0]];
    state.set(root, 1);
    while (stack.length) {
      const top = stack[stack.length - 1];
      const list = out.get(top[0]);
      if (top[1] < list.length) {
        const e = list[top[1]++];
        const s = state.get(e.to);
        if (s === 1) back.add(e);
        else if (!s) {
          state.set(e.to, 1);
          stack.push([e.to, 0]);
        }
      } else {
        state.set(top[0], 2);
        order.push(top[0]);
        stack.pop();
      }
    }
  };
  const starts = nodes.filter((n) => n.kind === "start").map((n) => n.id);
  for (const id of starts.concat(nodes.map((n) => n.id))) {
    if (!state.get(id)) visit(id);
  }
  const layer = new Map(nodes.map((n) => [n.id, 0]));
  for (const id of order.reverse()) {
    for (const e of out.get(id)) {
      if (!back.has(e)) layer.set(e.to, Math.max(layer.get(e.to), layer.get(id) + 1));
    }
  }
  // The end goes below every other node.
  let deepest = 0;
  for (const n of nodes) if (n.kind !== "end") deepest = Math.max(deepest, layer.get(n.id));
  for (const n of nodes) {
    if (n.kind === "end") layer.set(n.id, Math.max(layer.get(n.id), deepest + 1));
  }
  return { layer, back };
}

// Long edges get one virtual point per layer they cross, so they are
// ordered with the nodes and routed between them, never through them.
function withDummies(nodes, edges, layer, back) {
  const items = nodes.map((n) => ({ id: n.id, w: boxWidth(n) }));
  const links = [];
  const chains = new Map();
  edges.forEach((e, i) => {
    const a = layer.get(e.from), b = layer.get(e.to);
    if (back.has(e) || e.from === e.to || b <= a) return;
    let prev = e.from;
    const chain = [];
    for (let l = a + 1; l < b; l++) {
      const id = `\u0000${i}:${l}`;
      layer.set(id, l);
      items.push({ id, w: 14 });
      links.push({ from: prev, to: id });
      chain.push(id);
      prev = id;
    }
    links.push({ from: prev, to: e.to });
    chains.set(e, chain);
  });
  return { items, links, chains };
}

// Orders each layer by the mean position of its items' neighbours in the
// layer before (then after), a few sweeps: fewer crossings than
// declaration order.
function orderLayers(items, links, layer) {
  const rows = [];
  for (const n of items) (rows[layer.get(n.id)] ||= []).push(n.id);
  const filled = Array.from(rows, (r) => r || []);
  const preds = new Map(items.map((n) => [n.id, []]));
  const succs = new Map(items.map((n) => [n.id, []]));
  for (const l of links) {
    preds.get(l.to)?.push(l.from);
    succs.get(l.from)?.push(l.to);
  }
  const pos = new Map();
  filled.forEach((r) => r.forEach((id, i) => pos.set(id, i)));
  const sweep = (row, neighbours) => {
    const key = new Map();
    row.forEach((id, i) => {
      const ps = neighbours.get(id).map((p) => pos.get(p)).filter((p) => p !== undefined);
      key.set(id, ps.length ? ps.reduce((x, y) => x + y, 0) / ps.length : i);
    });
    row.sort((x, y) => key.get(x) - key.get(y));
    row.forEach((id, i) => pos.set(id, i));
  };
  for (let pass = 0; pass < 4; pass++) {
    for (let r = 1; r < filled.length; r++) sweep(filled[r], preds);
    for (let r = filled.length - 2; r >= 0; r--) sweep(filled[r], succs);
  }
  return filled;
}

function place(items, rows) {
  const widthOf = new Map(items.map((n) => [n.id, n.w]));
  const boxes = new Map();
  const widths = rows.map((row) =>
    row.reduce((sum, id) => sum + widthOf.get(id), 0) + NODE_GAP * Math.max(row.length - 1, 0));
  const widest = Math.max(...widths, 120);
  rows.forEach((row, r) => {
    let x = MARGIN + (widest - widths[r]) / 2;
    for (const id of row) {
      const w = widthOf.get(id);
      boxes.set(id, { x, y: MARGIN + r * LAYER_GAP, w, h: NODE_H });
      x += w + NODE_GAP;
    }
  });
  return { boxes, width: widest + 2 * MARGIN + 120, height: MARGIN * 2 + (rows.length - 1) * LAYER_GAP + NODE_H };
}

function boxWidth(node) {
  const label = shorten(node.label ?? node.id);
  return Math.max(96, Math.round(label.length * CHAR_W) + 28);
}

function defs() {
  const d = svgEl("defs");
  const marker = svgEl("marker", {
    id: "sg-arrow", viewBox: "0 0 10 10", refX: 9, refY: 5,
    markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse",
  });
  marker.appendChild(svgEl("path", { d: "M0,0 L10,5 L0,10 z", class: "arrowhead" }));
  d.appendChild(marker);
  return d;
}

// A forward edge from the bottom of `a` through the virtual points of
// its chain to (x2, y2): smooth curves between layers, straight through
// each point. The label goes at the middle of the route.
function forwardPath(a, chain, x2, y2, x1 = a.x + a.w / 2) {
  const pts = [[x1, a.y + a.h]];
  for (const d of chain) pts.push([d.x + d.w / 2, d.y], [d.x + d.w / 2, d.y + d.h]);
  pts.push([x2, y2]);
  let d = `M${pts[0][0]},${pts[0][1]}`;
  for (let i = 0; i + 1 < pts.length; i += 2) {
    const [x1, y1] = pts[i], [xb, yb] = pts[i + 1];
    const mid = (y1 + yb) / 2;
    d += ` C${x1},${mid} ${xb},${mid} ${xb},${yb}`;
    if (i + 2 < pts.length) d += ` L${pts[i + 2][0]},${pts[i + 2][1]}`;
  }
  const at = chain.length ? chain[Math.floor((chain.length - 1) / 2)] : null;
  const mx = at ? at.x + at.w / 2 : (pts[0][0] + x2) / 2;
  const my = at ? at.y + at.h / 2 : (pts[0][1] + y2) / 2;
  return { d, mx, my };
}

// An edge back up (a loop) or to itself: around the right of the nodes.
function loopPath(a, b, lane) {
  if (a === b) {
    const x = a.x + a.w, y = a.y + a.h / 2;
    return { d: `M${x},${y - 10} C${x + 46},${y - 30} ${x + 46},${y + 30} ${x},${y + 10}`, mx: x + 40, my: y, right: true };
  }
  const x1 = a.x + a.w, y1 = a.y + a.h / 2, x2 = b.x + b.w, y2 = b.y + b.h / 2;
  const out = Math.max(x1, x2) + 40 + lane * 22;
  return { d: `M${x1},${y1} C${out},${y1} ${out},${y2} ${x2},${y2}`, mx: out - 10, my: (y1 + y2) / 2 };
}

// A label centred on (x, y), or starting at x when `right`.
function edgeLabel(group, text, x0, y, right) {
  const shown = shorten(text);
  const width = Math.round(shown.length * 6.4) + 8;
  const x = right ? x0 + width / 2 : x0;
  const label = svgEl("text", { x, y: y + 4, class: "edge-label", "text-anchor": "middle" });
  label.textContent = shown;
  group.appendChild(svgEl("rect", { x: x - width / 2, y: y - 9, width, height: 17, rx: 3, class: "edge-label-bg" }));
  group.appendChild(label);
}

// Where each forward edge leaves its source and enters its target: spread
// along the box's bottom (top) in the order of the other ends, so a fan
// of edges does not start (end) in one point.
function ports(edges, boxes, chains) {
  const out = new Map(), into = new Map();
  const firstHop = (e) => boxes.get(chains.get(e)[0] ?? e.to);
  const lastHop = (e) => boxes.get(chains.get(e).at(-1) ?? e.from);
  const forward = edges.filter((e) => chains.has(e) && !(e.kind === "join" && e.join != null));
  const spread = (key, other, map) => {
    const groups = new Map();
    for (const e of forward) {
      const k = key(e);
      if (!groups.has(k)) groups.set(k, []);
      groups.get(k).push(e);
    }
    for (const [id, list] of groups) {
      const box = boxes.get(id);
      list.sort((p, q) => other(p).x - other(q).x);
      const width = Math.min(box.w * 0.6, 14 * (list.length - 1));
      list.forEach((e, i) => {
        const offset = list.length > 1 ? -width / 2 + (width * i) / (list.length - 1) : 0;
        map.set(e, box.x + box.w / 2 + offset);
      });
    }
  };
  spread((e) => e.from, firstHop, out);
  spread((e) => e.to, lastHop, into);
  return { out, into };
}

function drawEdges(svg, edges, boxes, chains, nameOf) {
  const joins = new Map();
  const { out, into } = ports(edges, boxes, chains);
  let lane = 0;
  for (const e of edges) {
    const a = boxes.get(e.from), b = boxes.get(e.to);
    const chain = chains.get(e);
    if (e.kind === "join" && e.join != null && chain) {
      const key = `${e.join}\u0000${e.to}`;
      if (!joins.has(key)) joins.set(key, { to: e.to, from: [] });
      joins.get(key).from.push({ id: e.from, chain });
      continue;
    }
    const p = chain
      ? forwardPath(a, chain.map((id) => boxes.get(id)), into.get(e), b.y, out.get(e))
      : loopPath(a, b, lane++);
    const kind = ["static", "conditional", "send", "goto", "join"].includes(e.kind) ? e.kind : "static";
    const g = svgEl("g", { class: `edge ${kind}`, "data-from": e.from, "data-to": e.to });
    const title = svgEl("title");
    title.textContent = `${kind} edge ${nameOf(e.from)} → ${nameOf(e.to)}${e.label ? ` (${e.label})` : ""}`;
    g.appendChild(title);
    g.appendChild(svgEl("path", { d: p.d, "marker-end": "url(#sg-arrow)" }));
    if (e.label) edgeLabel(g, e.label, p.mx, p.my, p.right);
    svg.appendChild(g);
  }
  for (const j of joins.values()) drawJoin(svg, j, boxes, nameOf);
}

// The sources of a join converge on a diamond above the joining node.
function drawJoin(svg, join, boxes, nameOf) {
  const b = boxes.get(join.to);
  const jx = b.x + b.w / 2, jy = b.y - 24;
  const g = svgEl("g", { class: "edge join", "data-to": join.to });
  const title = svgEl("title");
  title.textContent = `join: ${join.from.map((f) => nameOf(f.id)).join(", ")} all finish before ${nameOf(join.to)}`;
  g.appendChild(title);
  for (const from of join.from) {
    const p = forwardPath(boxes.get(from.id), from.chain.map((id) => boxes.get(id)), jx, jy);
    g.appendChild(svgEl("path", { d: p.d }));
  }
  g.appendChild(svgEl("path", { d: `M${jx},${jy} L${jx},${b.y}`, "marker-end": "url(#sg-arrow)" }));
  g.appendChild(svgEl("rect", { x: jx - 6, y: jy - 6, width: 12, height: 12, class: "join-point", transform: `rotate(45 ${jx} ${jy})` }));
  svg.appendChild(g);
}

function nodeTitle(node, status) {
  const parts = [node.label ?? node.id];
  if (node.description) parts.push(node.description);
  if (node.kind === "start") parts.push("where the run starts");
  if (node.kind === "end") parts.push("where the run ends");
  if (status) parts.push(status);
  return parts.join(" — ");
}

function drawNode(svg, node, box) {
  const kind = ["start", "end"].includes(node.kind) ? node.kind : "node";
  const g = svgEl("g", { class: `node kind-${kind}`, "data-node": node.id });
  const title = svgEl("title");
  title.textContent = nodeTitle(node, "");
  g.appendChild(title);
  const rx = kind === "node" ? 6 : NODE_H / 2;
  g.appendChild(svgEl("rect", { x: box.x, y: box.y, width: box.w, height: box.h, rx }));
  const label = svgEl("text", { x: box.x + box.w / 2, y: box.y + 28, "text-anchor": "middle", class: "node-label" });
  label.textContent = shorten(node.label ?? node.id);
  g.appendChild(label);
  const status = svgEl("text", { x: box.x + box.w / 2, y: box.y + 36, "text-anchor": "middle", class: "node-status" });
  g.appendChild(status);
  svg.appendChild(g);
  return { g, title, status, label, box };
}

// Draws `drawing` as an <svg role="img" aria-label="graph <name>">
// described by a text list of its nodes and edges (returned as `text`,
// for the page to place). setState(id, "running" | "done" | "") marks a
// node; reset() clears every mark.
export function drawGraph(drawing, name) {
  const nodes = Array.isArray(drawing?.nodes) ? drawing.nodes.filter((n) => n && n.id != null) : [];
  const ids = new Set(nodes.map((n) => n.id));
  const edges = Array.isArray(drawing?.edges)
    ? drawing.edges.filter((e) => e && ids.has(e.from) && ids.has(e.to))
    : [];
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const nameOf = (id) => byId.get(id)?.label ?? id;
  const { layer, back } = layers(nodes, edges);
  const { items, links, chains } = withDummies(nodes, edges, layer, back);
  const rows = orderLayers(items, links, layer);
  const { boxes, width, height } = place(items, rows);
  const textId = `graph-text-${Math.random().toString(36).slice(2)}`;
  const svg = svgEl("svg", {
    role: "img", "aria-label": `graph ${name}`, "aria-describedby": textId,
    viewBox: `0 0 ${width} ${height}`, width, height, class: "graph-drawing",
  });
  svg.appendChild(defs());
  drawEdges(svg, edges, boxes, chains, nameOf);
  const marks = new Map();
  for (const n of nodes) marks.set(n.id, { node: n, ...drawNode(svg, n, boxes.get(n.id)) });
  const text = describe(nodes, edges, nameOf, textId);
  const setState = (id, status) => {
    const m = marks.get(id);
    if (!m) return;
    m.g.classList.toggle("running", status === "running");
    m.g.classList.toggle("done", status === "done");
    m.status.textContent = status || "";
    m.label.setAttribute("y", m.box.y + (status ? 20 : 28));
    m.title.textContent = nodeTitle(m.node, status);
    const item = text.querySelector(`[data-node-text="${CSS.escape(String(id))}"] .node-state`);
    if (item) item.textContent = status ? ` (${status})` : "";
  };
  const reset = () => { for (const id of marks.keys()) setState(id, ""); };
  return { svg, text, setState, reset, width };
}

// The drawing as text: every node with its description, then every edge
// with its kind and label.
function describe(nodes, edges, nameOf, id) {
  const box = document.createElement("div");
  box.id = id;
  box.className = "graph-text";
  const nodeList = document.createElement("ul");
  nodeList.setAttribute("aria-label", "nodes");
  for (const n of nodes) {
    const li = document.createElement("li");
    li.setAttribute("data-node-text", String(n.id));
    const strong = document.createElement("strong");
    strong.textContent = nameOf(n.id);
    li.appendChild(strong);
    const detail = n.description ? `: ${n.description}` : n.kind === "node" ? "" : ` (${n.kind})`;
    li.appendChild(document.createTextNode(detail));
    const state = document.createElement("span");
    state.className = "node-state";
    li.appendChild(state);
    nodeList.appendChild(li);
  }
  const edgeList = document.createElement("ul");
  edgeList.setAttribute("aria-label", "edges");
  for (const e of edges) {
    const li = document.createElement("li");
    const label = e.label ? ` “${e.label}”` : "";
    li.textContent = `${nameOf(e.from)} → ${nameOf(e.to)}: ${e.kind}${label}`;
    edgeList.appendChild(li);
  }
  const h1 = document.createElement("h4");
  h1.textContent = "Nodes";
  const h2 = document.createElement("h4");
  h2.textContent = "Edges";
  box.append(h1, nodeList, h2, edgeList);
  return box;
}
