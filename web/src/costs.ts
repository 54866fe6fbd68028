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
 * fetchTurnCost reads a turn's cost once it ended. A call settles just
 * after it ends, so the last one may not be in the ledger yet: while
 * fewer calls than the turn made are counted, it asks again, a few times.
 */
export async function fetchTurnCost(conv: string, turn: string, modelCalls: number | undefined) {
  for (let i = 0; i < 6; i++) {
    try {
      const u = await api.turnUsage(conv, turn);
      addCosts({ [turn]: u });
      if (modelCalls === undefined ? i > 0 : u.calls >= modelCalls) return;
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
