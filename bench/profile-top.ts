// Prints the heaviest functions of a V8 .cpuprofile (node --cpu-prof): self
// time, and inclusive time for frames from this project, over the busiest
// window of the run (the load phase, not start-up or idle time).
//   node --import tsx bench/profile-top.ts <file.cpuprofile> [count] [window seconds]
import fs from "node:fs";

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount: number;
  children?: number[];
}
const [file, countArg, windowArg] = process.argv.slice(2);
const profile = JSON.parse(fs.readFileSync(file!, "utf8")) as { nodes: Node[]; samples: number[]; timeDeltas: number[] };
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
// Keep the window (default 5 s) with the fewest idle samples.
{
  const windowUs = Number(windowArg ?? 5) * 1e6;
  const times: number[] = [];
  let t = 0;
  for (const d of profile.timeDeltas) times.push((t += d));
  const idle = profile.samples.map((id) => (byId.get(id)!.callFrame.functionName === "(idle)" ? 1 : 0));
  let best = [0, profile.samples.length];
  let bestIdle = Infinity;
  let lo = 0;
  let idleIn = 0;
  for (let hi = 0; hi < times.length; hi++) {
    idleIn += idle[hi]!;
    while (times[hi]! - times[lo]! > windowUs) idleIn -= idle[lo++]!;
    if (times[hi]! - times[lo]! >= windowUs * 0.95 && idleIn / (hi - lo + 1) < bestIdle) {
      bestIdle = idleIn / (hi - lo + 1);
      best = [lo, hi + 1];
    }
  }
  profile.samples = profile.samples.slice(best[0], best[1]);
  console.log(`window of ${windowUs / 1e6} s, ${(bestIdle * 100).toFixed(0)}% idle`);
}
const parent = new Map<number, number>();
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
const total = profile.samples.length;
const label = (n: Node) => `${n.callFrame.functionName || "(anonymous)"} ${n.callFrame.url.replace(/^.*\/node_modules\//, "").replace(/^file:\/\/.*\/(src|gen|bench)\//, "$1/")}:${n.callFrame.lineNumber + 1}`;
const self = new Map<string, number>();
const inclusive = new Map<string, number>();
for (const id of profile.samples) {
  const n = byId.get(id)!;
  self.set(label(n), (self.get(label(n)) ?? 0) + 1);
  const seen = new Set<string>();
  for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
    const l = label(byId.get(cur)!);
    if (!seen.has(l)) inclusive.set(l, (inclusive.get(l) ?? 0) + 1);
    seen.add(l);
  }
}
const top = (m: Map<string, number>, filter: (l: string) => boolean) =>
  [...m.entries()].filter(([l]) => filter(l)).sort((a, b) => b[1] - a[1]).slice(0, Number(countArg ?? 25));
console.log(`${total} samples\n\nself time:`);
for (const [l, n] of top(self, () => true)) console.log(`${((n / total) * 100).toFixed(1).padStart(5)}%  ${l}`);
console.log("\ninclusive time, selected frames:");
for (const [l, n] of top(inclusive, (l) => /src\/|jose|knex|pino|prom-client|protobuf|connect|fastify|mysql2|undici|grpc|garbage|idle|program/i.test(l))) {
  console.log(`${((n / total) * 100).toFixed(1).padStart(5)}%  ${l}`);
}

// Self time by package: a native frame (a system call, a builtin) is charged
// to the nearest caller from a package or from this project, so the socket
// writes mysql2 makes count as mysql2's.
const packageOf = (url: string): string | undefined => {
  const dep = /node_modules\/((@[^/]+\/)?[^/]+)/.exec(url);
  if (dep !== null) return dep[1];
  const own = /\/(src|gen|bench)\/(?:([^/]+)\/)?/.exec(url);
  return own === null ? undefined : `${own[1]}/${own[2] ?? ""}`;
};
const byPackage = new Map<string, number>();
for (const id of profile.samples) {
  const fn = byId.get(id)!.callFrame.functionName;
  let who = /^\((garbage collector|idle|program)\)$/.test(fn) ? fn : undefined;
  for (let cur: number | undefined = id; who === undefined && cur !== undefined; cur = parent.get(cur)) who = packageOf(byId.get(cur)!.callFrame.url);
  who ??= "node (no package above)";
  byPackage.set(who, (byPackage.get(who) ?? 0) + 1);
}
console.log("\nself time by package:");
for (const [l, n] of top(byPackage, () => true)) console.log(`${((n / total) * 100).toFixed(1).padStart(5)}%  ${l}`);
