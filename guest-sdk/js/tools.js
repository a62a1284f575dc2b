// Other mounted graph tools, called through the host as sub-runs of the
// current run: the `tools` capability (`"capabilities": ["tools"]` in
// package.json's `sandgraph` field, and a `tools` grant in the operator's
// config). Each call returns a Promise; the host call itself is
// synchronous, so several awaited with `Promise.all` run one after another.
import { capability, hostCall, promised, ToolError } from "./registry.js";

function kindOf(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  return typeof value === "object" ? "an object" : `a ${typeof value}`;
}

/**
 * The tools this graph is granted, in the host's order: `{ name,
 * description, parameters }` with `parameters` the JSON Schema (an object)
 * and `description` null when the tool has none.
 */
export function list() {
  return promised(listNow);
}

/** `list()`, answered at once (for the SDK's own synchronous callers). */
export function listNow() {
  const infos = hostCall(ToolError, () => capability("tools").list());
  return infos.map((info) => {
    let parameters;
    try {
      parameters = JSON.parse(info.parameters);
    } catch {
      parameters = { type: "object" };
    }
    return { name: info.name, description: info.description ?? null, parameters };
  });
}

/**
 * Runs tool `name` with `args` (an object) as a sub-run sharing this run's
 * deadline, fuel and memory budget; resolves to its final state. Rejects
 * with `ToolError` (kinds `denied`, `not_found`, `invalid_args`,
 * `recursion`, `quota`, `failed`).
 */
export function call(name, args) {
  return promised(() => callNow(name, args));
}

/** `call()`, answered at once. */
export function callNow(name, args) {
  if (typeof name !== "string") throw new TypeError(`tools.call: the tool name must be a string, not ${kindOf(name)}`);
  const value = args ?? {};
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new TypeError(`tools.call("${name}"): args must be an object, not ${kindOf(value)}`);
  }
  const text = JSON.stringify(value);
  return JSON.parse(hostCall(ToolError, () => capability("tools").call(name, text)));
}

/** The `tools` capability as one object: `tools.list()`, `tools.call(name, args)`. */
export const tools = Object.freeze({ list, call });
