// web/package.json makes an installable package (`npm pack` in web/): every module the
// client and the element import, however deep, ships in it with its types, and every
// export names a file that exists. The types keep up with the modules: each .d.ts declares
// the values its module exports, and tabd.d.ts TabdClient's members (tsc, over
// Tests/web/types/usage.ts, checks the rest).
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const web = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "web");
const pkg = JSON.parse(readFileSync(join(web, "package.json"), "utf8"));

// The relative modules `file` imports, and theirs, by name.
function imported(file, seen = new Set()) {
  for (const m of readFileSync(join(web, file), "utf8").matchAll(/^\s*(?:import|export)\b[^;]*?from\s+"\.\/([^"]+)"|^\s*import\s+"\.\/([^"]+)"/gm)) {
    const name = m[1] || m[2];
    if (!seen.has(name)) { seen.add(name); imported(name, seen); }
  }
  return seen;
}

test("every module the client and the element import ships in the package, with its types", () => {
  const needed = new Set(["tabd.js", "tabd-tab-bar.js", ...imported("tabd.js"), ...imported("tabd-tab-bar.js")]);
  assert.ok(needed.has("model.js") && needed.has("icons.js") && needed.has("colors.js"), [...needed].join(", "));
  for (const file of needed) {
    assert.ok(pkg.files.includes(file), `${file} is not in package.json's files`);
    const types = file.replace(/\.js$/, ".d.ts");
    assert.ok(pkg.files.includes(types) && existsSync(join(web, types)), `${types} is missing`);
  }
});

test("every export names files that exist, and the page's own files stay out", () => {
  for (const [name, target] of Object.entries(pkg.exports)) {
    for (const path of Object.values(target)) assert.ok(existsSync(join(web, path)), `${name} → ${path}`);
  }
  for (const file of pkg.files) assert.ok(existsSync(join(web, file)), file);
  for (const page of ["index.html", "app.js", "style.css", "favicon.svg"]) assert.ok(!pkg.files.includes(page), page);
  assert.equal(pkg.type, "module");
});

// The names a module exports (values only: functions, classes, constants, re-exports),
// read from its source; for a .d.ts, the names its types declare.
function exportedNames(file) {
  const text = readFileSync(join(web, file), "utf8");
  const names = new Set();
  for (const m of text.matchAll(/^export\s+(?:declare\s+)?(?:async\s+)?(?:function\*?|class|const|let|var)\s+([A-Za-z_$][\w$]*)/gm)) names.add(m[1]);
  for (const m of text.matchAll(/^export\s*\{([^}]*)\}/gm)) {
    for (const part of m[1].split(",")) {
      const name = part.trim().split(/\s+as\s+/).pop();
      if (name) names.add(name);
    }
  }
  return [...names].sort();
}

test("each module's .d.ts declares exactly the values the module exports", () => {
  for (const file of pkg.files.filter((f) => f.endsWith(".js"))) {
    assert.deepEqual(exportedNames(file.replace(/\.js$/, ".d.ts")), exportedNames(file), file);
  }
});

test("tabd.d.ts declares TabdClient's public members, and only those", async () => {
  const { TabdClient } = await import("../../web/tabd.js");
  // A client that never connects: closed before its first attempt (a microtask away).
  class NoSocket { constructor() { throw new Error("not used"); } }
  const client = new TabdClient("http://127.0.0.1:1/", { WebSocket: NoSocket });
  client.close();
  const actual = new Set([...Object.keys(client), ...Object.getOwnPropertyNames(TabdClient.prototype)]);
  actual.delete("constructor");
  const types = readFileSync(join(web, "tabd.d.ts"), "utf8");
  const body = /^export class TabdClient \{\n([\s\S]*?)^\}/m.exec(types)[1];
  const declared = new Set([...body.matchAll(/^ {2}(?:readonly\s+)?(?:get\s+|set\s+)?([A-Za-z_$][\w$]*)\s*[(:]/gm)].map((m) => m[1]));
  declared.delete("constructor");
  assert.deepEqual([...declared].sort(), [...actual].sort());
});
