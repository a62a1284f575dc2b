// Unit tests of fetch (http.js) against fake wasi:http imports, off wasm:
// the request it builds, the answer it reads, the order it drops the
// resources in (children first), its bounds and its typed errors.
import assert from "node:assert/strict";
import { test } from "node:test";

import { bindCapabilities } from "../registry.js";
import { MAX_RESPONSE_BYTES, errorKind, splitUrl, utf8Decode, utf8Encode } from "../http.js";
import { Headers, HttpError, Request, Response, fetch } from "../index.js";
import { installPromise, settle } from "../jobs.js";

installPromise();

/**
 * Fake `wasi:http` imports. `answer` is `{ status, headers, chunks }` or
 * `{ error: { tag, val } }`; every resource records its drop in `log` and
 * refuses to be dropped while a child lives, as the host does.
 */
function fakeHttp(answer) {
  const log = [];
  const sent = {};
  class Resource {
    constructor(name, parent) {
      this.name = name;
      this.parent = parent ?? null;
      this.children = 0;
      this.dropped = false;
      if (parent) parent.children += 1;
    }

    [Symbol.dispose]() {
      if (this.dropped) throw new Error(`${this.name} dropped twice`);
      if (this.children > 0) throw new Error(`${this.name}: resource has children`);
      this.dropped = true;
      if (this.parent) this.parent.children -= 1;
      log.push(this.name);
    }
  }
  class Fields extends Resource {
    static fromList(entries) {
      const f = new Fields("fields");
      f.list = entries;
      return f;
    }

    entries() {
      return this.list;
    }
  }
  class OutgoingRequest extends Resource {
    constructor(headers) {
      super("outgoing-request");
      sent.headers = headers.list.map(([n, v]) => [n, utf8Decode(v)]);
    }

    setMethod(m) {
      sent.method = m;
    }

    setScheme(s) {
      sent.scheme = s;
    }

    setAuthority(a) {
      sent.authority = a;
    }

    setPathWithQuery(p) {
      sent.path = p;
    }

    body() {
      const body = new Resource("outgoing-body");
      body.write = () => {
        const stream = new Resource("output-stream", body);
        stream.blockingWriteAndFlush = (chunk) => {
          assert.ok(chunk.length <= 4096);
          sent.body = [...(sent.body ?? []), ...chunk];
        };
        return stream;
      };
      return body;
    }
  }
  const types = {
    Fields,
    OutgoingRequest,
    OutgoingBody: {
      finish(body) {
        body[Symbol.dispose]();
      },
    },
    IncomingBody: {
      finish(body) {
        body[Symbol.dispose]();
        return new Resource("future-trailers");
      },
    },
  };
  const handler = {
    handle(request) {
      if (answer.denied) throw Object.assign(new Error("x"), { payload: answer.denied });
      request.dropped = true;
      const future = new Resource("future-incoming-response");
      let polls = 0;
      future.subscribe = () => {
        const p = new Resource("pollable", future);
        p.block = () => {
          polls += 1;
        };
        return p;
      };
      future.get = () => {
        if (polls === 0) return undefined;
        if (answer.error) return { tag: "ok", val: { tag: "err", val: answer.error } };
        const response = new Resource("incoming-response", future);
        response.status = () => answer.status;
        response.headers = () => {
          const f = new Fields("incoming-headers", response);
          f.list = answer.headers.map(([n, v]) => [n, utf8Encode(v)]);
          return f;
        };
        response.consume = () => {
          const body = new Resource("incoming-body", response);
          let i = 0;
          body.stream = () => {
            const stream = new Resource("input-stream", body);
            stream.blockingRead = (len) => {
              assert.equal(typeof len, "number", "a u64 is passed as a Number");
              if (i >= answer.chunks.length) throw Object.assign(new Error("closed"), { payload: { tag: "closed" } });
              return answer.chunks[i++];
            };
            return stream;
          };
          return body;
        };
        // The response is a child of the future until it is dropped.
        return { tag: "ok", val: { tag: "ok", val: response } };
      };
      return future;
    },
  };
  return { imports: { handler, types }, log, sent };
}

test("fetch sends the request and reads the whole answer, dropping children first", () => {
  const fake = fakeHttp({ status: 201, headers: [["content-type", "application/json"], ["set-cookie", "a"], ["set-cookie", "b"]], chunks: [utf8Encode('{"ok":'), utf8Encode("true}")] });
  bindCapabilities({ http: fake.imports });
  const response = settle(fetch("HTTP://Example.com:8080/a b/é?q=1#frag", { method: "post", headers: { "X-Test": "yes" }, body: "héllo" }), "fetch");
  assert.equal(response.status, 201);
  assert.equal(response.ok, true);
  assert.equal(response.url, "HTTP://Example.com:8080/a b/é?q=1#frag");
  assert.equal(response.headers.get("Content-Type"), "application/json");
  assert.equal(response.headers.get("set-cookie"), "a, b");
  assert.deepEqual(settle(response.json(), "json"), { ok: true });
  assert.throws(() => settle(response.text(), "text"), { message: "the response body was already read" });
  assert.deepEqual(fake.sent.method, { tag: "post" });
  assert.deepEqual(fake.sent.scheme, { tag: "HTTP" });
  assert.equal(fake.sent.authority, "example.com:8080");
  assert.equal(fake.sent.path, "/a%20b/%C3%A9?q=1");
  assert.deepEqual(fake.sent.headers, [["x-test", "yes"], ["content-type", "text/plain;charset=UTF-8"]]);
  assert.equal(utf8Decode(Uint8Array.from(fake.sent.body)), "héllo");
  assert.deepEqual(fake.log, [
    "output-stream",
    "outgoing-body",
    "pollable",
    "incoming-headers",
    "input-stream",
    "incoming-body",
    "future-trailers",
    "incoming-response",
    "future-incoming-response",
  ]);
});

test("fetch failures are HttpErrors with kinds; bad urls are protocol errors", () => {
  const err = (answer, url = "http://127.0.0.1:1/") => {
    bindCapabilities({ http: fakeHttp(answer).imports });
    try {
      settle(fetch(url), "fetch");
    } catch (e) {
      return e;
    }
    assert.fail("expected a rejection");
  };
  const denied = err({ denied: { tag: "HTTP-request-denied" } });
  assert.ok(denied instanceof HttpError);
  assert.deepEqual([denied.kind, denied.message], ["denied", "denied: http://127.0.0.1:1/: HTTP-request-denied"]);
  assert.equal(err({ error: { tag: "connection-refused" } }).message, "connection: http://127.0.0.1:1/: connection-refused");
  assert.equal(err({ error: { tag: "DNS-error", val: { rcode: "NXDOMAIN" } } }).kind, "connection");
  assert.equal(err({ error: { tag: "HTTP-response-timeout" } }).kind, "timeout");
  assert.equal(err({}, "ftp://x/").message, 'protocol: "ftp://x/" is not an absolute http or https url');
  assert.equal(err({}, "http://bücher.example/").message, 'protocol: "http://bücher.example/": the host name is not ascii: give its punycode form (xn--...)');
  const big = err({ status: 200, headers: [], chunks: [new Uint8Array(MAX_RESPONSE_BYTES), new Uint8Array(1)] });
  assert.equal(big.message, `protocol: http://127.0.0.1:1/: the response body is larger than ${MAX_RESPONSE_BYTES} bytes`);
  assert.deepEqual([errorKind("destination-IP-prohibited"), errorKind("TLS-protocol-error"), errorKind("HTTP-protocol-error")], ["denied", "connection", "protocol"]);
  bindCapabilities({});
  assert.throws(() => settle(fetch("http://x/"), "fetch"), { name: "CapabilityNotImported", message: /without the "http" capability/ });
});

test("Headers, Request and Response read like the standard classes", () => {
  const h = new Headers([["A", "1"], ["b", "2"]]);
  h.append("a", "3");
  assert.equal(h.get("a"), "1, 3");
  assert.deepEqual([...h], [["a", "1, 3"], ["b", "2"]]);
  h.delete("A");
  assert.equal(h.has("a"), false);
  assert.throws(() => h.set("bad name", "x"), { message: 'Headers: "bad name" is not a valid header name' });
  assert.throws(() => new Request("http://x/", { body: "x" }), { message: "a GET request cannot have a body" });
  const r = new Response("hé", { status: 404 });
  assert.equal(r.ok, false);
  assert.equal(r.headers.get("content-type"), "text/plain;charset=UTF-8");
  assert.equal(settle(r.clone().text(), "text"), "hé");
  assert.deepEqual([...settle(r.bytes(), "bytes")], [0x68, 0xc3, 0xa9]);
  assert.deepEqual(splitUrl("https://user@h/"), ["https", "h", "/"]);
  assert.equal(utf8Decode(Uint8Array.from([0xff, 0x41])), "\ufffdA");
  assert.equal(utf8Decode(utf8Encode("😀")), "😀");
});
