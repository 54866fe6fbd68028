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

const names: Record<string, string> = {
  spend_per_day: "today",
  spend_per_week: "this week",
  spend_per_month: "this month",
  spend_per_5h: "5 h",
  tokens_per_day: "tokens today",
  requests_per_minute: "requests/min",
  concurrent_requests: "at once",
};

function one(l: LimitStatus): { used: string; left: string; max: string } {
  if (l.max_usd !== undefined) return { used: fmtUSD(l.used_usd), left: fmtUSD(l.remaining_usd), max: fmtUSD(l.max_usd) };
  return { used: (l.used ?? 0).toLocaleString(), left: (l.remaining ?? 0).toLocaleString(), max: (l.max ?? 0).toLocaleString() };
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
          <span class="limit" key={l.kind} data-kind={l.kind} data-used={l.used_usd ?? l.used} data-remaining={l.remaining_usd ?? l.remaining}
            title={`${names[l.kind] ?? l.kind}: ${v.used} of ${v.max} used, ${v.left} left${resets}`}>
            {names[l.kind] ?? l.kind}: <span data-testid="budget-used">{v.used}</span> used · <span data-testid="budget-remaining">{v.left}</span> left
          </span>
        );
      })}
    </span>
  );
}
