// Bundles a sandgraph JavaScript graph into one ES module for the QuickJS
// backend. `sandgraph build` writes this file into its temporary build
// folder and runs it with node:
//
//   node bundle.mjs JCO GRAPH_DIR MAIN SDK OUT
//
// JCO is the jco command `sandgraph build` found (rolldown, the bundler jco
// itself uses, is resolved from jco's own install); GRAPH_DIR the graph's
// folder and MAIN its main module, relative to it; SDK the folder the build
// wrote the SDK's modules to (`@sandgraph/sdk` resolves to its index.js,
// `@sandgraph/sdk/NAME` to NAME.js); OUT the bundle.
//
// The entry module and the SDK are virtual modules, and the graph's own
// modules are named relative to its folder, so the bundle's text does not
// depend on where the graph or the build folder is.
import { createRequire } from "node:module";
import { existsSync, readFileSync, realpathSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [jco, graphDir, main, sdk, out] = process.argv.slice(2);

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

const ENTRY = "\0sandgraph:entry";
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
const entrySource = [
  `import ${JSON.stringify(PACKAGE)};`,
  'import host from "sandgraph:graph/host@0.2.0";',
  `import * as graphModule from ${JSON.stringify(`./${main}`)};`,
  'import { __bindComponent } from "@sandgraph/sdk";',
  "export const graph = __bindComponent(graphModule, host);",
  "",
].join("\n");

const virtual = {
  name: "sandgraph",
  resolveId(id, importer) {
    if (id === ENTRY || id === PACKAGE) return id;
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
    external: [/^sandgraph:graph\//],
    plugins: [virtual],
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
