// The host's capabilities as the graph imports them, and their typed errors.
//
// A capability is imported only when package.json's `sandgraph.capabilities`
// lists it (`"llm"`, `"tools"`, `"http"`); the component's entry module
// hands the imported ones to `bindCapabilities`. Calling one that was not
// imported throws `CapabilityNotImported`.

/**
 * A failed call to a host capability: `kind` names the WIT error case
 * (with `-` as `_`, e.g. `denied`, `not_found`), `detail` is the host's
 * text; the message is `<kind>: <detail>`, which is what an uncaught one
 * fails the node with.
 */
export class CapabilityError extends Error {
  constructor(kind, detail) {
    super(`${kind}: ${detail}`);
    this.name = "CapabilityError";
    this.kind = kind;
    this.detail = detail;
  }
}

/** A failed `llm` call: kinds `denied`, `quota`, `timeout`, `provider`, `malformed`. */
export class LlmError extends CapabilityError {
  constructor(kind, detail) {
    super(kind, detail);
    this.name = "LlmError";
  }
}
LlmError.KINDS = Object.freeze(["denied", "quota", "timeout", "provider", "malformed"]);

/** A failed `tools` call: kinds `denied`, `not_found`, `invalid_args`, `recursion`, `quota`, `failed`. */
export class ToolError extends CapabilityError {
  constructor(kind, detail) {
    super(kind, detail);
    this.name = "ToolError";
  }
}
ToolError.KINDS = Object.freeze(["denied", "not_found", "invalid_args", "recursion", "quota", "failed"]);

/**
 * A failed `fetch`: `denied` (the origin is not granted, or the host
 * refused the request), `timeout`, `connection` (DNS, refused, reset, TLS),
 * `protocol` (a malformed or too large request or response).
 */
export class HttpError extends CapabilityError {
  constructor(kind, detail) {
    super(kind, detail);
    this.name = "HttpError";
  }
}
HttpError.KINDS = Object.freeze(["denied", "timeout", "connection", "protocol"]);

/** A capability the build did not import was called. */
export class CapabilityNotImported extends Error {
  constructor(capability) {
    super(
      `this graph was built without the "${capability}" capability: add "${capability}" to "sandgraph": { "capabilities": [...] } in package.json`,
    );
    this.name = "CapabilityNotImported";
    this.capability = capability;
  }
}

// The imported capabilities, by name ("llm", "tools", "http").
let imported = {};

/**
 * Internal: the component's entry module hands over the capability
 * imports the build made; a unit test hands over fakes.
 */
export function bindCapabilities(imports) {
  imported = { ...(imports ?? {}) };
}

/** The import of `capability`, or `CapabilityNotImported`. */
export function capability(name) {
  const found = imported[name];
  if (found === undefined || found === null) throw new CapabilityNotImported(name);
  return found;
}

/**
 * Calls `fn` (a host import returning a WIT result) and turns its error
 * case into `ErrorClass(kind, text)`: the bindings throw an Error whose
 * `payload` is `{ tag, val }`.
 */
export function hostCall(ErrorClass, fn) {
  try {
    return fn();
  } catch (err) {
    const payload = err?.payload;
    if (payload && typeof payload.tag === "string") {
      throw new ErrorClass(payload.tag.replaceAll("-", "_"), String(payload.val ?? ""));
    }
    throw err;
  }
}

/** `fn()` as a Promise: its value, or a rejection with what it threw. */
export function promised(fn) {
  try {
    return Promise.resolve(fn());
  } catch (err) {
    return Promise.reject(err);
  }
}
