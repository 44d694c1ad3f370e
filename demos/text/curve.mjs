// The demo's compact loss curve from a `kiln train text --log` file (JSON lines: step lines with
// `loss`, evaluation lines with `valid_loss`), with the command that trained the model:
//   node demos/text/curve.mjs LOG.jsonl "kiln train text ..." > demos/text/models/shakespeare-curve.json
import { readFileSync } from "node:fs";

const [log, command] = process.argv.slice(2);
const lines = readFileSync(log, "utf8").split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l));
const round = (v) => Math.round(v * 1000) / 1000;
// A resumed run logs again from its checkpoint's step: the last line of each step wins.
const points = (key) => [...new Map(lines.filter((l) => typeof l[key] === "number").map((l) => [l.step, round(l[key])]))];
console.log(JSON.stringify({ command, train: points("loss"), valid: points("valid_loss") }));
