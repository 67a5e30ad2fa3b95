// The e2e tests' oracle: folds event streams with the page's fold, web/model.js (itself
// checked against the daemon's own fold by the golden streams of Tests/web/model.test.mjs),
// so the tests compare what tabd serves with that fold and no third port of it.
//
// Run by replay.py: `node fold.mjs` reads one JSON value on stdin,
//   [{ "start": <wire snapshot>, "frames": [<events frame as sent>, …] }, …]
// folds each stream's frames into its start with applyFrame, in order, and writes one JSON
// value on stdout, a result per stream, in the same order:
//   { "snapshot": <toWire of the state after the last frame> }
//   { "refused": { "seq": <seq>, "message": "…" }, "snapshot": <toWire of the state before it> }
// Exit status 0 whenever it wrote that; anything else (bad input, a fault) is not 0, with
// the reason on stderr.
import { FoldError, applyFrame, fromWire, toWire } from "../../web/model.js";

let input = "";
process.stdin.setEncoding("utf8");
for await (const chunk of process.stdin) input += chunk;

const results = JSON.parse(input).map(({ start, frames }) => {
  const state = fromWire(start);
  try {
    for (const frame of frames) applyFrame(state, frame);
  } catch (err) {
    if (!(err instanceof FoldError)) throw err;
    return { refused: { seq: err.seq, message: err.message }, snapshot: toWire(state) };
  }
  return { snapshot: toWire(state) };
});
process.stdout.write(JSON.stringify(results));
