// Promises that settle inside the call that made them.
//
// A graph's node, router, reducer or validator may be `async` or return a
// Promise, and the host's capability calls (llm, tools, fetch) return
// Promises. The component answers each host call synchronously, so a
// Promise must settle before the export returns.
//
// QuickJS queues the reactions of its built-in Promise in its own job
// queue, which only the embedder can run (JS_ExecutePendingJob), and
// componentize-qjs's synchronous runtime (`--backend-qjs-disable-async`)
// never runs it after an export call, nor exposes a way to (its `__cqjs`
// namespace has makeStream, makeFuture, getMemoryUsage, runGc and
// asyncExports only). Its asynchronous runtime would, but it needs the
// component-model async ABI, which the host does not use. So the SDK brings
// its own: `installPromise()` (called first by the component's entry module)
// replaces the global `Promise` and `queueMicrotask` with ones whose jobs
// are kept in a queue of this module, and `settle()` runs that queue until
// it is empty. `sandgraph build` lowers `async`/`await` (and async
// generators) to generators and calls of the global `Promise` (rolldown's
// es2016 target), so they use this Promise too. Off wasm (node, the unit
// tests) the global Promise is left alone unless a test installs this one.

/** Jobs waiting to run: reactions of settled promises, queued microtasks. */
const queue = [];
let head = 0;

function enqueue(job) {
  queue.push(job);
}

/**
 * Runs every queued job, and the jobs those queue, until none is left.
 * An exception a job throws is the job's own business (promise reactions
 * catch theirs); a microtask's is reported after the queue ran dry.
 */
export function runJobs() {
  let thrown = null;
  try {
    while (head < queue.length) {
      const job = queue[head];
      queue[head] = undefined;
      head += 1;
      try {
        job();
      } catch (err) {
        thrown ??= { err };
      }
    }
  } finally {
    queue.length = 0;
    head = 0;
  }
  if (thrown) throw thrown.err;
}

const PENDING = 0;
const FULFILLED = 1;
const REJECTED = 2;

function isObject(value) {
  return value !== null && (typeof value === "object" || typeof value === "function");
}

/** A Promise/A+ promise (with the ES statics) whose jobs run in `runJobs`. */
export class SandPromise {
  constructor(executor) {
    if (typeof executor !== "function") throw new TypeError("Promise resolver is not a function");
    this._state = PENDING;
    this._value = undefined;
    this._reactions = [];
    const [resolve, reject] = resolvers(this);
    try {
      executor(resolve, reject);
    } catch (err) {
      reject(err);
    }
  }

  then(onFulfilled, onRejected) {
    const C = this.constructor?.[Symbol.species] ?? SandPromise;
    let resolveNext;
    let rejectNext;
    const next = new (typeof C === "function" ? C : SandPromise)((res, rej) => {
      resolveNext = res;
      rejectNext = rej;
    });
    const reaction = (state, value) => {
      const handler = state === FULFILLED ? onFulfilled : onRejected;
      if (typeof handler !== "function") {
        (state === FULFILLED ? resolveNext : rejectNext)(value);
        return;
      }
      try {
        resolveNext(handler(value));
      } catch (err) {
        rejectNext(err);
      }
    };
    if (this._state === PENDING) this._reactions.push(reaction);
    else {
      const { _state: state, _value: value } = this;
      enqueue(() => reaction(state, value));
    }
    return next;
  }

  catch(onRejected) {
    return this.then(undefined, onRejected);
  }

  finally(onFinally) {
    if (typeof onFinally !== "function") return this.then(onFinally, onFinally);
    const C = this.constructor;
    return this.then(
      (value) => C.resolve(onFinally()).then(() => value),
      (err) =>
        C.resolve(onFinally()).then(() => {
          throw err;
        }),
    );
  }

  static resolve(value) {
    if (value instanceof SandPromise && value.constructor === this) return value;
    return new this((res) => res(value));
  }

  static reject(reason) {
    return new this((_, rej) => rej(reason));
  }

  static withResolvers() {
    let resolve;
    let reject;
    const promise = new this((res, rej) => {
      resolve = res;
      reject = rej;
    });
    return { promise, resolve, reject };
  }

  static all(iterable) {
    return combine(this, iterable, (values, i, value) => {
      values[i] = value;
    }, (reject, err) => reject(err), (values) => values);
  }

  static allSettled(iterable) {
    return combine(
      this,
      iterable,
      (values, i, value) => {
        values[i] = { status: "fulfilled", value };
      },
      (_reject, reason, values, i, done) => {
        values[i] = { status: "rejected", reason };
        done();
      },
      (values) => values,
    );
  }

  static any(iterable) {
    const C = this;
    return new C((resolve, reject) => {
      const errors = [];
      let left = 1;
      let i = 0;
      const finish = () => {
        left -= 1;
        if (left === 0) reject(new AggregateError(errors, "all promises were rejected"));
      };
      for (const item of iterable) {
        const index = i++;
        left += 1;
        C.resolve(item).then(resolve, (err) => {
          errors[index] = err;
          finish();
        });
      }
      finish();
    });
  }

  static race(iterable) {
    const C = this;
    return new C((resolve, reject) => {
      for (const item of iterable) C.resolve(item).then(resolve, reject);
    });
  }

  static get [Symbol.species]() {
    return this;
  }

  get [Symbol.toStringTag]() {
    return "Promise";
  }
}

/**
 * The shared body of `all` and `allSettled`: `onValue` stores a fulfilled
 * value, `onError(reject, err, values, i, done)` handles a rejection.
 */
function combine(C, iterable, onValue, onError, result) {
  return new C((resolve, reject) => {
    const values = [];
    let left = 1;
    const done = () => {
      left -= 1;
      if (left === 0) resolve(result(values));
    };
    let i = 0;
    for (const item of iterable) {
      const index = i++;
      values[index] = undefined;
      left += 1;
      C.resolve(item).then(
        (value) => {
          onValue(values, index, value);
          done();
        },
        (err) => onError(reject, err, values, index, done),
      );
    }
    done();
  });
}

function settlePromise(promise, state, value) {
  if (promise._state !== PENDING) return;
  promise._state = state;
  promise._value = value;
  const reactions = promise._reactions;
  promise._reactions = [];
  for (const reaction of reactions) enqueue(() => reaction(state, value));
}

/** The resolve and reject functions of `promise` (each effective once). */
function resolvers(promise) {
  let done = false;
  const reject = (reason) => {
    if (done) return;
    done = true;
    settlePromise(promise, REJECTED, reason);
  };
  const resolve = (value) => {
    if (done) return;
    done = true;
    if (value === promise) {
      settlePromise(promise, REJECTED, new TypeError("a promise cannot be resolved with itself"));
      return;
    }
    if (!isObject(value)) {
      settlePromise(promise, FULFILLED, value);
      return;
    }
    let then;
    try {
      then = value.then;
    } catch (err) {
      settlePromise(promise, REJECTED, err);
      return;
    }
    if (typeof then !== "function") {
      settlePromise(promise, FULFILLED, value);
      return;
    }
    // A thenable is adopted in a job of its own, as the spec does.
    enqueue(() => {
      let called = false;
      try {
        then.call(
          value,
          (v) => {
            if (called) return;
            called = true;
            done = false;
            resolve(v);
          },
          (r) => {
            if (called) return;
            called = true;
            settlePromise(promise, REJECTED, r);
          },
        );
      } catch (err) {
        if (!called) {
          called = true;
          settlePromise(promise, REJECTED, err);
        }
      }
    });
  };
  return [resolve, reject];
}

/** Queues `fn` to run in `runJobs`, as the standard `queueMicrotask`. */
export function queueMicrotask(fn) {
  if (typeof fn !== "function") throw new TypeError("queueMicrotask: the callback must be a function");
  enqueue(fn);
}

/**
 * Makes `SandPromise` the global `Promise` (and `queueMicrotask` its job
 * queue's). The component's entry module calls it before any other module
 * runs; a unit test may call it to run async nodes under node.
 */
export function installPromise() {
  Object.defineProperty(globalThis, "Promise", { value: SandPromise, writable: true, configurable: true });
  Object.defineProperty(globalThis, "queueMicrotask", { value: queueMicrotask, writable: true, configurable: true });
}

/** True for a value `await` would wait for. */
export function isThenable(value) {
  return isObject(value) && typeof value.then === "function";
}

/**
 * The value `value` settles to, after running the job queue: a fulfilled
 * promise's value, a rejected one's reason thrown; a value that is not a
 * promise as it is. `what` names the function whose answer it is in the
 * error when the promise is still pending once no job is left: nothing
 * could settle it any more (a timer, an event, a promise nobody resolves,
 * or a promise of the engine's own, which this queue does not run).
 */
export function settle(value, what) {
  if (!isThenable(value)) {
    runJobs();
    return value;
  }
  let state = PENDING;
  let out;
  value.then(
    (v) => {
      state = FULFILLED;
      out = v;
    },
    (e) => {
      state = REJECTED;
      out = e;
    },
  );
  runJobs();
  if (state === PENDING) {
    throw new Error(
      `${what}: the promise never settled: nothing was left to run while it waited (a graph has no timers, events or background work; await only the sdk's calls and promises you resolve)`,
    );
  }
  if (state === REJECTED) throw out;
  return out;
}
