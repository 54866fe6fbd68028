// What each turn cost, for the turn footers. The control-plane prices the
// calls from its own ledger; the page only shows the dollars it is given.
import { signal } from "@preact/signals";
import { api, type TurnUsage } from "./api";

/** By turn id. */
export const turnCosts = signal<ReadonlyMap<string, TurnUsage>>(new Map());

export function addCosts(us: Record<string, TurnUsage> | undefined) {
  if (!us) return;
  const m = new Map(turnCosts.value);
  for (const [k, v] of Object.entries(us)) m.set(k, v);
  turnCosts.value = m;
}

/**
 * fetchTurnCost reads a turn's cost once it ended. A call settles a moment
 * after it ends (the control-plane writes settlements in batches), so the
 * last ones may not be in the ledger yet: while fewer calls than the turn
 * made are counted, it asks again, a few times, and shows the figure only
 * once it is whole (or on the last try), never a partial sum as the cost.
 */
export async function fetchTurnCost(conv: string, turn: string, modelCalls: number | undefined) {
  const tries = 6;
  for (let i = 0; i < tries; i++) {
    try {
      const u = await api.turnUsage(conv, turn);
      const whole = modelCalls === undefined ? i > 0 : u.calls >= modelCalls;
      if (whole || i === tries - 1) {
        addCosts({ [turn]: u });
        return;
      }
    } catch {
      return; // no ledger here (503), or the turn is gone: the footer shows no cost
    }
    await new Promise((r) => setTimeout(r, 250 * 2 ** i));
  }
}

/** fmtUSD shows exact decimal dollars to a person. */
export function fmtUSD(s: string | undefined): string {
  if (s === undefined) return "";
  const n = Number(s);
  if (!isFinite(n)) return "";
  if (n === 0) return "$0.00";
  if (n < 0.0001) return "<$0.0001";
  if (n < 0.01) return "$" + n.toFixed(4);
  return "$" + n.toLocaleString(undefined, { minimumFractionDigits: 2, maximumFractionDigits: 2 });
}
