// Bundles a sandgraph JavaScript graph into one ES module for the QuickJS
// backend. `sandgraph build` writes this file into its temporary build
// folder and runs it with node:
//
//   node bundle.mjs JCO GRAPH_DIR MAIN SDK OUT [CAPABILITY...]
//
// JCO is the jco command `sandgraph build` found (rolldown, the bundler jco
// itself uses, is resolved from jco's own install); GRAPH_DIR the graph's
// folder and MAIN its main module, relative to it; SDK the folder the build
// wrote the SDK's modules to (`@sandgraph/sdk` resolves to its index.js,
// `@sandgraph/sdk/NAME` to NAME.js); OUT the bundle; each CAPABILITY one
// the world imports (`llm`, `tools`, or `http@VERSION`: wasi:http at that
// version), handed to the SDK. wasi:http is imported under the stand-in
// namespace `xasi` (jco's --backend-qjs-stub-wasi would stub `wasi:`
// imports); `sandgraph build` renames the component's imports back.
//
// `async`/`await` are lowered to generators and the global `Promise`
// (rolldown's es2016 target), and the entry installs the SDK's Promise
// before any other module runs: the component's QuickJS never runs its own
// promise jobs, the SDK runs its own (see jobs.js). A graph module of the
// graph's own that calls a timer (setTimeout, setInterval, setImmediate)
// is refused here: nothing runs after a node's call.
//
// The entry module and the SDK are virtual modules, and the graph's own
// modules are named relative to its folder, so the bundle's text does not
// depend on where the graph or the build folder is.
import { createRequire } from "node:module";
import { existsSync, readFileSync, realpathSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { pathToFileURL } from "node:url";

const [jco, graphDir, main, sdk, out, ...capabilities] = process.argv.slice(2);

function fail(message) {
  process.stderr.write(`${message}\n`);
  process.exit(1);
}

let rolldownPath;
try {
  rolldownPath = createRequire(realpathSync(jco)).resolve("rolldown");
} catch (err) {
  fail(`cannot find rolldown (a dependency of @bytecodealliance/jco) beside ${jco}: ${err.message}`);
}
const { rolldown } = await import(pathToFileURL(rolldownPath).href);
let parseAstPath;
try {
  parseAstPath = createRequire(realpathSync(jco)).resolve("rolldown/parseAst");
} catch (err) {
  fail(`cannot find rolldown/parseAst beside ${jco}: ${err.message}`);
}
const { parseAst } = await import(pathToFileURL(parseAstPath).href);

const ENTRY = "\0sandgraph:entry";
// The namespace wasi:http's packages are imported under while jco runs.
const WASI_STAND_IN = "xasi";
// Runs first: installs the SDK's Promise.
const INSTALL = "\0sandgraph:install";
// Sets the package's name before the graph's module runs: `compile()`
// without a name takes it (index.js reads the global).
const PACKAGE = "\0sandgraph:package";
let packageName = null;
try {
  packageName = JSON.parse(readFileSync(join(graphDir, "package.json"), "utf8")).name ?? null;
} catch (err) {
  fail(`${join(graphDir, "package.json")}: ${err.message}`);
}
// SDK modules are named `\0sandgraph:sdk/FILE`.
const SDK = "\0sandgraph:sdk/";
const SDK_MODULE = /^[a-z][a-z0-9_-]*\.js$/;
const CAPABILITY = /^[a-z][a-z0-9-]*(@[0-9]+\.[0-9]+\.[0-9]+)?$/;
for (const cap of capabilities) if (!CAPABILITY.test(cap)) fail(`bad capability name ${JSON.stringify(cap)}`);
/** The import statement of capability `cap` as `cap${i}`. */
function capabilityImport(cap, i) {
  const [name, version] = cap.split("@");
  if (name !== "http") return `import cap${i} from "sandgraph:graph/${name}@0.2.0";`;
  const wasi = (path) => JSON.stringify(`${WASI_STAND_IN}:${path}@${version}`);
  return [
    `import * as cap${i}_handler from ${wasi("http/outgoing-handler")};`,
    `import * as cap${i}_types from ${wasi("http/types")};`,
    `import * as cap${i}_streams from ${wasi("io/streams")};`,
    `import * as cap${i}_poll from ${wasi("io/poll")};`,
    `const cap${i} = { handler: cap${i}_handler, types: cap${i}_types, streams: cap${i}_streams, poll: cap${i}_poll };`,
  ].join("\n");
}
const entrySource = [
  `import ${JSON.stringify(INSTALL)};`,
  `import ${JSON.stringify(PACKAGE)};`,
  'import host from "sandgraph:graph/host@0.2.0";',
  ...capabilities.map(capabilityImport),
  `import * as graphModule from ${JSON.stringify(`./${main}`)};`,
  'import { __bindComponent } from "@sandgraph/sdk";',
  `export const graph = __bindComponent(graphModule, host, { ${capabilities.map((cap, i) => `${JSON.stringify(cap.split("@")[0])}: cap${i}`).join(", ")} });`,
  "",
].join("\n");
const installSource = 'import { installPromise } from "@sandgraph/sdk/jobs";\ninstallPromise();\n';

const TIMERS = new Set(["setTimeout", "setInterval", "setImmediate"]);

/** The timers `ast` calls (`setTimeout(...)`, `globalThis.setTimeout(...)`), with their offsets. */
function timerCalls(ast) {
  const found = [];
  const walk = (node) => {
    if (Array.isArray(node)) {
      for (const n of node) walk(n);
      return;
    }
    if (node === null || typeof node !== "object") return;
    if (node.type === "CallExpression") {
      const callee = node.callee;
      const name =
        callee?.type === "Identifier"
          ? callee.name
          : callee?.type === "MemberExpression" && !callee.computed && callee.object?.type === "Identifier" && ["globalThis", "window", "self"].includes(callee.object.name)
            ? callee.property?.name
            : null;
      if (TIMERS.has(name)) found.push({ name, start: node.start });
    }
    for (const key of Object.keys(node)) {
      if (key !== "type" && key !== "start" && key !== "end") walk(node[key]);
    }
  };
  walk(ast);
  return found;
}

function lineOf(code, offset) {
  return code.slice(0, offset).split("\n").length;
}

const timerCheck = {
  name: "sandgraph-timers",
  transform(code, id) {
    if (id.startsWith("\0") || id.includes("/node_modules/")) return null;
    let ast;
    try {
      ast = parseAst(code);
    } catch {
      // Not valid JavaScript: rolldown's own parse reports it with its file and line.
      return null;
    }
    const calls = timerCalls(ast);
    if (calls.length > 0) {
      const where = calls.map((c) => `${c.name} at ${relative(graphDir, id)}:${lineOf(code, c.start)}`).join(", ");
      fail(`a graph cannot use timers (${where}): a node runs to completion within its call and nothing runs after it; await the sdk's calls instead`);
    }
    return null;
  },
};

const virtual = {
  name: "sandgraph",
  resolveId(id, importer) {
    if (id === ENTRY || id === INSTALL || id === PACKAGE) return id;
    if (id === "@sandgraph/sdk") return `${SDK}index.js`;
    let file = null;
    if (id.startsWith("@sandgraph/sdk/")) file = `${id.slice("@sandgraph/sdk/".length)}.js`;
    else if (importer?.startsWith(SDK) && id.startsWith("./")) file = id.slice(2);
    if (file === null) return null;
    if (!SDK_MODULE.test(file) || !existsSync(join(sdk, file))) {
      fail(`${id}: no such module in @sandgraph/sdk`);
    }
    return `${SDK}${file}`;
  },
  load(id) {
    if (id === ENTRY) return entrySource;
    if (id === INSTALL) return installSource;
    if (id === PACKAGE) return `globalThis.__SANDGRAPH_PACKAGE_NAME__ = ${JSON.stringify(packageName)};\n`;
    if (id.startsWith(SDK)) return readFileSync(join(sdk, id.slice(SDK.length)), "utf8");
    return null;
  },
};

const warnings = [];
let build;
try {
  build = await rolldown({
    input: ENTRY,
    cwd: graphDir,
    platform: "neutral",
    logLevel: "warn",
    onLog(level, log) {
      if (level === "warn") warnings.push(`warning: ${log.message}`);
    },
    external: [/^sandgraph:graph\//, new RegExp(`^${WASI_STAND_IN}:`)],
    plugins: [virtual, timerCheck],
    // async functions become generators over the global (the SDK's) Promise.
    transform: { target: "es2016" },
    resolve: { mainFields: ["module", "main"] },
  });
} catch (err) {
  fail(String(err?.message ?? err));
}
try {
  const { output } = await build.generate({
    format: "esm",
    codeSplitting: false,
    comments: false,
    // Routers are named after their functions: keep the names the source gave.
    keepNames: true,
  });
  const chunks = output.filter((item) => item.type === "chunk");
  if (chunks.length !== 1) {
    fail(`the graph bundles into ${chunks.length} chunks: dynamic import() is not supported`);
  }
  writeFileSync(out, chunks[0].code);
} catch (err) {
  fail(String(err?.message ?? err));
} finally {
  await build.close();
}
for (const w of warnings) process.stderr.write(`${w}\n`);
