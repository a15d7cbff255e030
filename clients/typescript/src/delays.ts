// Delays as the service reads them.

/** A delay: milliseconds, or text as the service reads it (`"15m"`, `"1h 30m"`). */
export type Delay = number | string;

export const delayText = (d: Delay): string => (typeof d === "number" ? `${Math.round(d)}ms` : d);

/** A delay in milliseconds: a number, or text such as `"20s"`, `"500ms"`, `"1m"` (60 s if not of that form). */
export function delayMs(d: Delay): number {
  if (typeof d === "number") return d;
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)$/.exec(d.trim());
  if (!m) return 60_000;
  return Number(m[1]) * { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 }[m[2] as "ms" | "s" | "m" | "h"];
}
