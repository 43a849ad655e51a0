// CPU and memory of a process, read from /proc (Linux).
import fs from "node:fs";

const ticksPerSecond = 100;

/** CPU seconds (user + system) the process has used so far. */
export function cpuSeconds(pid: number): number {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) / ticksPerSecond;
  } catch {
    return Number.NaN;
  }
}

/** Resident memory now and at its peak, in MB. */
export function memory(pid: number): { rssMb: number; peakMb: number } {
  try {
    const status = fs.readFileSync(`/proc/${pid}/status`, "utf8");
    const kb = (key: string) => Number(new RegExp(`${key}:\\s+(\\d+)`).exec(status)?.[1] ?? Number.NaN);
    return { rssMb: kb("VmRSS") / 1024, peakMb: kb("VmHWM") / 1024 };
  } catch {
    return { rssMb: Number.NaN, peakMb: Number.NaN };
  }
}

/** Measures a process's CPU use (in cores) and peak RSS over the time `work` takes. */
export async function measured<T>(pid: number, work: () => Promise<T>): Promise<{ result: T; cpuCores: number; rssMb: number }> {
  let rssMb = memory(pid).rssMb;
  const sampler = setInterval(() => (rssMb = Math.max(rssMb, memory(pid).rssMb)), 100);
  const cpu0 = cpuSeconds(pid);
  const t0 = performance.now();
  try {
    const result = await work();
    const seconds = (performance.now() - t0) / 1000;
    return { result, cpuCores: (cpuSeconds(pid) - cpu0) / seconds, rssMb };
  } finally {
    clearInterval(sampler);
  }
}

/** CPU seconds the whole machine has spent busy so far (every core, from /proc/stat). */
export function machineBusySeconds(): number {
  try {
    const line = fs.readFileSync("/proc/stat", "utf8").split("\n")[0]!;
    const [user, nice, system, , , irq, softirq, steal] = line.trim().split(/\s+/).slice(1).map(Number);
    return (user! + nice! + system! + irq! + softirq! + steal!) / ticksPerSecond;
  } catch {
    return Number.NaN;
  }
}

/** The pid of the first process whose command name is `name`, if any (Linux). */
export function pidOf(name: string): number | undefined {
  try {
    for (const entry of fs.readdirSync("/proc")) {
      if (!/^\d+$/.test(entry)) continue;
      try {
        if (fs.readFileSync(`/proc/${entry}/comm`, "utf8").trim() === name) return Number(entry);
      } catch {
        // The process ended while we looked.
      }
    }
  } catch {
    // No /proc.
  }
  return undefined;
}
