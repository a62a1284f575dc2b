// Module hooks for node tests: the SDK's capability module, as prebuilt.js
// (`./capabilities.js`) and graphs (`@sandgraph/sdk/capabilities`) import it,
// resolves to the fake beside this file. A test registers them before it
// imports what it tests:
//
//   import { register } from "node:module";
//   register("../fakes/hooks.mjs", import.meta.url);
//   const prebuilt = await import("../prebuilt.js");
const FAKE = new URL("./capabilities.js", import.meta.url).href;
/** The SDK's folder: its modules import the capability module as ./capabilities.js. */
const SDK = new URL("../", import.meta.url).href;

export async function resolve(specifier, context, next) {
  const parent = context.parentURL ?? "";
  const fromSdk = specifier === "./capabilities.js" && parent.startsWith(SDK) && !parent.slice(SDK.length).includes("/");
  if (specifier === "@sandgraph/sdk/capabilities" || fromSdk) return { url: FAKE, shortCircuit: true };
  return next(specifier, context);
}
