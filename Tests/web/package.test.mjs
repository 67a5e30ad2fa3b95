// web/package.json makes an installable package (`npm pack` in web/): every module the
// client and the element import, however deep, ships in it with its types, and every
// export names a file that exists.
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
