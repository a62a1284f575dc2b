// `fetch` over `wasi:http/outgoing-handler`: the `http` capability
// (`"capabilities": ["http"]` in package.json's `sandgraph` field, and an
// `http` grant of the origin in the operator's config). The SDK installs
// `fetch`, `Request`, `Response` and `Headers` as globals when the build
// imported the capability.
//
// A request is made, and its whole answer read, inside the `fetch` call
// (the wait counts against the run's deadline, not its fuel); the Promise
// it returns is already settled. Every wasi resource is dropped explicitly,
// children first (a parent dropped before its child traps with "resource
// has children"): the body's input-stream, the incoming-body (through
// `finish`) and its trailers, the response's headers, the response, and
// last the future it came from.
import { capability, HttpError, promised } from "./registry.js";

/** The largest response body read: it lives in the instance's memory, whose cap would end the run with a trap. */
export const MAX_RESPONSE_BYTES = 16 * 1024 * 1024;
/** The largest request body sent (bounded for the same reason). */
export const MAX_REQUEST_BYTES = 16 * 1024 * 1024;
/** The most bytes asked of the body stream per read. */
const READ_SIZE = 64 * 1024;
/** The most bytes written per `blocking-write-and-flush` (wasi:io allows 4096). */
const WRITE_SIZE = 4096;

const METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"];

/** UTF-8 bytes of `text` (QuickJS has no TextEncoder). */
export function utf8Encode(text) {
  const out = [];
  for (const ch of String(text)) {
    let c = ch.codePointAt(0);
    if (c >= 0xd800 && c <= 0xdfff) c = 0xfffd;
    if (c < 0x80) out.push(c);
    else if (c < 0x800) out.push(0xc0 | (c >> 6), 0x80 | (c & 63));
    else if (c < 0x10000) out.push(0xe0 | (c >> 12), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
    else out.push(0xf0 | (c >> 18), 0x80 | ((c >> 12) & 63), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
  }
  return Uint8Array.from(out);
}

/** The text of UTF-8 `bytes`; a malformed sequence becomes U+FFFD. */
export function utf8Decode(bytes) {
  let out = "";
  let i = 0;
  const n = bytes.length;
  const cont = (k) => i + k < n && (bytes[i + k] & 0xc0) === 0x80;
  while (i < n) {
    const b = bytes[i];
    let c = 0xfffd;
    let len = 1;
    if (b < 0x80) c = b;
    else if (b >= 0xc2 && b < 0xe0 && cont(1)) {
      c = ((b & 31) << 6) | (bytes[i + 1] & 63);
      len = 2;
    } else if (b >= 0xe0 && b < 0xf0 && cont(1) && cont(2)) {
      c = ((b & 15) << 12) | ((bytes[i + 1] & 63) << 6) | (bytes[i + 2] & 63);
      len = 3;
      if (c < 0x800 || (c >= 0xd800 && c <= 0xdfff)) c = 0xfffd;
    } else if (b >= 0xf0 && b < 0xf5 && cont(1) && cont(2) && cont(3)) {
      c = ((b & 7) << 18) | ((bytes[i + 1] & 63) << 12) | ((bytes[i + 2] & 63) << 6) | (bytes[i + 3] & 63);
      len = 4;
      if (c < 0x10000 || c > 0x10ffff) c = 0xfffd;
    }
    out += String.fromCodePoint(c);
    i += len;
  }
  return out;
}

/** Headers, as the standard class: names are case-insensitive, repeated values are joined with ", ". */
export class Headers {
  constructor(init) {
    this._list = [];
    if (init === undefined || init === null) return;
    const pairs = init instanceof Headers ? init._list : typeof init[Symbol.iterator] === "function" ? [...init] : Object.entries(init);
    for (const pair of pairs) {
      if (!Array.isArray(pair) || pair.length !== 2) throw new TypeError("Headers: each header must be a [name, value] pair");
      this.append(pair[0], pair[1]);
    }
  }

  append(name, value) {
    this._list.push([checkName(name), String(value).trim()]);
  }

  set(name, value) {
    const key = checkName(name);
    this.delete(key);
    this._list.push([key, String(value).trim()]);
  }

  get(name) {
    const key = String(name).toLowerCase();
    const values = this._list.filter(([n]) => n === key).map(([, v]) => v);
    return values.length === 0 ? null : values.join(", ");
  }

  has(name) {
    const key = String(name).toLowerCase();
    return this._list.some(([n]) => n === key);
  }

  delete(name) {
    const key = String(name).toLowerCase();
    this._list = this._list.filter(([n]) => n !== key);
  }

  *entries() {
    const names = [...new Set(this._list.map(([n]) => n))].sort();
    for (const name of names) yield [name, this.get(name)];
  }

  *keys() {
    for (const [name] of this.entries()) yield name;
  }

  *values() {
    for (const [, value] of this.entries()) yield value;
  }

  forEach(fn, thisArg) {
    for (const [name, value] of this.entries()) fn.call(thisArg, value, name, this);
  }

  [Symbol.iterator]() {
    return this.entries();
  }
}

function checkName(name) {
  const key = String(name).toLowerCase();
  if (!/^[!#$%&'*+\-.^_`|~0-9a-z]+$/.test(key)) throw new TypeError(`Headers: "${name}" is not a valid header name`);
  return key;
}

/** Bytes and a default content type of a request body. */
function bodyBytes(body) {
  if (body === undefined || body === null) return { bytes: null, type: null };
  if (typeof body === "string") return { bytes: utf8Encode(body), type: "text/plain;charset=UTF-8" };
  if (body instanceof Uint8Array) return { bytes: body, type: null };
  if (body instanceof ArrayBuffer) return { bytes: new Uint8Array(body), type: null };
  if (ArrayBuffer.isView(body)) return { bytes: new Uint8Array(body.buffer, body.byteOffset, body.byteLength), type: null };
  if (typeof URLSearchParams !== "undefined" && body instanceof URLSearchParams) {
    return { bytes: utf8Encode(body.toString()), type: "application/x-www-form-urlencoded;charset=UTF-8" };
  }
  throw new TypeError("the body must be a string, an ArrayBuffer or a typed array (JSON: JSON.stringify it)");
}

/** An HTTP request, as the standard class (without streams, signals or caches). */
export class Request {
  constructor(input, init = {}) {
    const base = input instanceof Request ? input : null;
    this.url = base ? base.url : String(input);
    const method = String(init.method ?? base?.method ?? "GET").toUpperCase();
    this.method = method;
    this.headers = new Headers(init.headers ?? base?.headers);
    const { bytes, type } = init.body !== undefined ? bodyBytes(init.body) : { bytes: base?._bytes ?? null, type: null };
    if (bytes !== null && (method === "GET" || method === "HEAD")) throw new TypeError(`a ${method} request cannot have a body`);
    if (bytes !== null && bytes.length > MAX_REQUEST_BYTES) throw new HttpError("protocol", `${this.url}: the request body is larger than ${MAX_REQUEST_BYTES} bytes`);
    if (type !== null && !this.headers.has("content-type")) this.headers.set("content-type", type);
    this._bytes = bytes;
  }
}

/** An HTTP answer, as the standard class: the whole body is already read. */
export class Response {
  constructor(body, init = {}) {
    const { bytes, type } = bodyBytes(body);
    this.status = init.status ?? 200;
    this.statusText = init.statusText ?? "";
    this.headers = new Headers(init.headers);
    if (type !== null && !this.headers.has("content-type")) this.headers.set("content-type", type);
    this.url = init.url ?? "";
    this.redirected = false;
    this.type = "basic";
    this._bytes = bytes ?? new Uint8Array(0);
    this.bodyUsed = false;
  }

  /** True for a status from 200 to 299. */
  get ok() {
    return this.status >= 200 && this.status < 300;
  }

  _take() {
    if (this.bodyUsed) return Promise.reject(new TypeError("the response body was already read"));
    this.bodyUsed = true;
    return Promise.resolve(this._bytes);
  }

  /** The body as UTF-8 text. */
  text() {
    return this._take().then(utf8Decode);
  }

  /** The body parsed as JSON. */
  json() {
    return this.text().then((text) => JSON.parse(text));
  }

  /** The body's bytes. */
  bytes() {
    return this._take().then((b) => new Uint8Array(b));
  }

  /** The body's bytes as an ArrayBuffer. */
  arrayBuffer() {
    return this.bytes().then((b) => b.buffer);
  }

  clone() {
    if (this.bodyUsed) throw new TypeError("a response whose body was read cannot be cloned");
    return new Response(this._bytes, { status: this.status, statusText: this.statusText, headers: this.headers, url: this.url });
  }
}

/** `[scheme, authority, path-with-query]` of an absolute http(s) url. */
export function splitUrl(url) {
  const m = /^([A-Za-z][A-Za-z0-9+.-]*):\/\/([^/?#]*)([^?#]*)(\?[^#]*)?(#.*)?$/.exec(url);
  const scheme = m?.[1].toLowerCase();
  if (!m || (scheme !== "http" && scheme !== "https")) throw new HttpError("protocol", `${JSON.stringify(url)} is not an absolute http or https url`);
  const authority = m[2].includes("@") ? m[2].slice(m[2].lastIndexOf("@") + 1) : m[2];
  if (authority === "" || /\s/.test(authority)) throw new HttpError("protocol", `${JSON.stringify(url)} has no host`);
  if (/[^\x21-\x7e]/.test(authority)) {
    throw new HttpError("protocol", `${JSON.stringify(url)}: the host name is not ascii: give its punycode form (xn--...)`);
  }
  const escape = (part) => part.replace(/[^\x21-\x7e]|["<>\\^`{|}]/gu, (c) => encodeURIComponent(c));
  return [scheme, authority.toLowerCase(), escape(m[3] || "/") + escape(m[4] ?? "")];
}

/** The `HttpError` kind of a wasi:http `error-code` tag. */
export function errorKind(tag) {
  if (tag === "HTTP-request-denied" || tag === "destination-IP-prohibited") return "denied";
  if (/timeout/i.test(tag)) return "timeout";
  if (/^(DNS|destination|connection|TLS)/.test(tag)) return "connection";
  return "protocol";
}

function httpError(code, url) {
  const tag = typeof code?.tag === "string" ? code.tag : String(code);
  const detail = code?.val;
  const text = detail === undefined || detail === null || detail === "" ? tag : `${tag} (${typeof detail === "object" ? JSON.stringify(detail) : detail})`;
  return new HttpError(errorKind(tag), `${url}: ${text}`);
}

/** `fn()`, its wasi error (an Error with a `payload` error-code) as an HttpError. */
function wasiCall(url, fn) {
  try {
    return fn();
  } catch (err) {
    if (err?.payload !== undefined) throw httpError(err.payload, url);
    throw err;
  }
}

function drop(resource) {
  resource?.[Symbol.dispose]?.();
}

/** A `result` nested in an option: its ok value, or its err thrown by `onErr`. */
function okOf(result, onErr) {
  if (result !== null && typeof result === "object" && (result.tag === "ok" || result.tag === "err")) {
    if (result.tag === "err") onErr(result.val);
    return result.val;
  }
  return result;
}

function send(request) {
  const { handler, types } = capability("http");
  const url = request.url;
  const [scheme, authority, path] = splitUrl(url);
  const fields = [...request.headers._list].map(([name, value]) => [name, utf8Encode(value)]);
  const headers = wasiCall(url, () => types.Fields.fromList(fields));
  const outgoing = new types.OutgoingRequest(headers);
  const method = METHODS.includes(request.method) ? { tag: request.method.toLowerCase() } : { tag: "other", val: request.method };
  wasiCall(url, () => {
    outgoing.setMethod(method);
    outgoing.setScheme({ tag: scheme === "https" ? "HTTPS" : "HTTP" });
    outgoing.setAuthority(authority);
    outgoing.setPathWithQuery(path);
  });
  const body = wasiCall(url, () => outgoing.body());
  let future;
  try {
    future = wasiCall(url, () => handler.handle(outgoing, undefined));
  } catch (err) {
    drop(body);
    throw err;
  }
  try {
    writeBody(types, body, request._bytes ?? new Uint8Array(0), url);
    const response = wait(future, url);
    try {
      const fieldsIn = response.headers();
      let pairs;
      try {
        pairs = fieldsIn.entries();
      } finally {
        drop(fieldsIn);
      }
      const status = response.status();
      const bytes = readBody(types, response, url);
      const out = new Response(null, { status, url });
      for (const [name, value] of pairs) out.headers.append(name, utf8Decode(value));
      out._bytes = bytes;
      return out;
    } finally {
      drop(response);
    }
  } finally {
    drop(future);
  }
}

function writeBody(types, body, bytes, url) {
  const stream = wasiCall(url, () => body.write());
  try {
    for (let start = 0; start < bytes.length; start += WRITE_SIZE) {
      const chunk = bytes.subarray(start, start + WRITE_SIZE);
      try {
        stream.blockingWriteAndFlush(chunk);
      } catch (err) {
        throw new HttpError("connection", `${url}: the request body: ${err?.payload?.tag ?? err?.message ?? err}`);
      }
    }
  } finally {
    drop(stream);
  }
  wasiCall(url, () => types.OutgoingBody.finish(body, undefined));
}

/** Blocks on the response future; its incoming-response. */
function wait(future, url) {
  for (;;) {
    const answer = future.get();
    if (answer !== undefined && answer !== null) {
      const inner = okOf(answer, () => {
        throw new HttpError("protocol", `${url}: the response was already taken`);
      });
      return okOf(inner, (code) => {
        throw httpError(code, url);
      });
    }
    const pollable = future.subscribe();
    try {
      pollable.block();
    } finally {
      drop(pollable);
    }
  }
}

function readBody(types, response, url) {
  const body = wasiCall(url, () => response.consume());
  const chunks = [];
  let size = 0;
  try {
    const stream = wasiCall(url, () => body.stream());
    try {
      for (;;) {
        let chunk;
        try {
          // A u64 is a Number here: componentize-qjs traps on a BigInt.
          chunk = stream.blockingRead(READ_SIZE);
        } catch (err) {
          if (err?.payload?.tag === "closed") break;
          throw new HttpError("connection", `${url}: the body stopped: ${err?.payload?.tag ?? err?.message ?? err}`);
        }
        size += chunk.length;
        if (size > MAX_RESPONSE_BYTES) throw new HttpError("protocol", `${url}: the response body is larger than ${MAX_RESPONSE_BYTES} bytes`);
        chunks.push(chunk);
      }
    } finally {
      drop(stream);
    }
  } finally {
    drop(types.IncomingBody.finish(body));
  }
  const bytes = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    bytes.set(c, at);
    at += c.length;
  }
  return bytes;
}

/**
 * The standard `fetch`: resolves to a `Response` with the whole body read
 * (at most `MAX_RESPONSE_BYTES`), or rejects with `HttpError` (kinds
 * `denied`, `timeout`, `connection`, `protocol`). Redirects are not
 * followed: a 3xx answer is the response.
 */
export function fetch(input, init) {
  return promised(() => send(input instanceof Request && init === undefined ? input : new Request(input, init)));
}

/** Makes `fetch`, `Request`, `Response` and `Headers` globals (when the build imported http). */
export function installFetch() {
  for (const [name, value] of Object.entries({ fetch, Request, Response, Headers })) {
    Object.defineProperty(globalThis, name, { value, writable: true, configurable: true });
  }
}
