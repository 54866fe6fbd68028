// The caller's budget in the header: per limit, what is used and what is
// left, read from the control-plane and read again after every turn.
import { signal } from "@preact/signals";
import { api, type LimitStatus } from "./api";
import { fmtUSD } from "./costs";

const limits = signal<LimitStatus[] | null>(null);

export async function loadBudget() {
  try {
    limits.value = (await api.budget()).limits;
  } catch {
    limits.value = null; // no budget service: nothing to show
  }
}

export const names: Record<string, string> = {
  spend_per_day: "today",
  spend_per_week: "this week",
  spend_per_month: "this month",
  spend_per_5h: "5 h",
  tokens_per_day: "tokens today",
  requests_per_minute: "requests/min",
  concurrent_requests: "at once",
};

// Exact dollars as nanodollars, so that what is left is the limit less
// what was used to the last digit.
function nanos(s: string | undefined): bigint {
  const m = /^(-?)(\d+)(?:\.(\d{1,9}))?$/.exec(s ?? "");
  if (!m) return 0n;
  const v = BigInt(m[2]) * 1_000_000_000n + BigInt((m[3] ?? "").padEnd(9, "0"));
  return m[1] ? -v : v;
}
function dollars(n: bigint): string {
  const neg = n < 0n;
  if (neg) n = -n;
  let frac = (n % 1_000_000_000n).toString().padStart(9, "0").replace(/0+$/, "");
  while (frac.length < 2) frac += "0";
  return (neg ? "-" : "") + (n / 1_000_000_000n).toString() + "." + frac;
}

/**
 * left is what the period still allows: the limit less what was spent.
 * What calls under way hold (held) is not spent yet; it is shown on its
 * own, since it includes money the control-plane sets aside ahead of
 * calls.
 */
export function one(l: LimitStatus): { used: string; left: string; leftExact: string; max: string; held: string } {
  if (l.max_usd !== undefined) {
    const left = nanos(l.max_usd) - nanos(l.used_usd);
    const exact = dollars(left < 0n ? 0n : left);
    return { used: fmtUSD(l.used_usd), left: fmtUSD(exact), leftExact: exact, max: fmtUSD(l.max_usd), held: fmtUSD(l.held_usd) };
  }
  const left = Math.max((l.max ?? 0) - (l.used ?? 0), 0);
  return { used: (l.used ?? 0).toLocaleString(), left: left.toLocaleString(), leftExact: String(left), max: (l.max ?? 0).toLocaleString(), held: (l.held ?? 0).toLocaleString() };
}

export function BudgetBadge() {
  const ls = limits.value;
  if (!ls || ls.length === 0) return null;
  return (
    <span class="budget" data-testid="budget" role="status" aria-label="Your budget">
      {ls.map((l) => {
        const v = one(l);
        const resets = l.resets_at ? "; resets " + new Date(l.resets_at).toLocaleString() : "";
        return (
          <span class="limit" key={l.kind} data-kind={l.kind} data-used={l.used_usd ?? l.used} data-remaining={v.leftExact}
            title={`${names[l.kind] ?? l.kind}: ${v.used} of ${v.max} used, ${v.left} left, ${v.held} held by calls under way${resets}`}>
            {names[l.kind] ?? l.kind}: <span data-testid="budget-used">{v.used}</span> used · <span data-testid="budget-remaining">{v.left}</span> left
          </span>
        );
      })}
    </span>
  );
}
