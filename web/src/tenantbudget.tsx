// A tenant-admin's view of the budgets of what they administer: the
// tenant's limits, its envs' and its members', and what each member spent
// this month. Everyone else sees only their own budget, in the header. The
// control-plane decides what a caller may see; this view only asks for the
// tenants (or envs) the caller's memberships make them administer, and
// shows a limit's figures only when the answer holds them.
import { signal } from "@preact/signals";
import { useEffect, useRef } from "preact/hooks";
import { trapTab, focusComposer } from "./dialog";
import { api, ApiError, type Me, type SubjectBudget, type TenantBudget, type UsageReport } from "./api";
import { names, one } from "./budget";
import { fmtUSD } from "./costs";

interface Scope {
  tenant: string;
  env?: string;
}

/** administered lists the tenants (or envs) the caller is a tenant-admin of. */
export function administered(me: Me | null): Scope[] {
  return (me?.memberships ?? []).filter((m) => m.role === "tenant-admin").map((m) => ({ tenant: m.tenant, env: m.env || undefined }));
}

const open = signal(false);
const views = signal<{ scope: Scope; budget?: TenantBudget; usage?: UsageReport; error?: string }[]>([]);

async function load(scopes: Scope[]) {
  views.value = await Promise.all(
    scopes.map(async (scope) => {
      try {
        const [budget, usage] = await Promise.all([api.tenantBudget(scope.tenant, scope.env), api.tenantUsage(scope.tenant, scope.env)]);
        return { scope, budget, usage };
      } catch (e) {
        return { scope, error: (e as ApiError).message };
      }
    }),
  );
}

function Limits({ sb, label }: { sb: SubjectBudget; label: string }) {
  if (sb.limits.length === 0) {
    return (
      <tr data-subject={sb.subject} data-kind="">
        <td>{label}</td>
        <td colSpan={4} class="muted">no limit of its own</td>
      </tr>
    );
  }
  return (
    <>
      {sb.limits.map((l) => {
        const withheld = l.used_usd === undefined && l.used === undefined;
        const v = one(l);
        return (
          <tr key={sb.subject + l.kind} data-subject={sb.subject} data-kind={l.kind} data-withheld={withheld ? "1" : "0"}
            data-used={withheld ? undefined : l.used_usd ?? l.used} data-remaining={withheld ? undefined : v.leftExact}>
            <td>{label}</td>
            <td>{names[l.kind] ?? l.kind}: {v.max}</td>
            {withheld ? (
              <td colSpan={2} class="muted" title={sb.withheld}>not shown: it counts use beyond what you administer</td>
            ) : (
              <>
                <td>{v.used} used</td>
                <td>{v.left} left</td>
              </>
            )}
            <td>{l.resets_at ? "resets " + new Date(l.resets_at).toLocaleString() : ""}</td>
          </tr>
        );
      })}
    </>
  );
}

function View({ v }: { v: (typeof views.value)[number] }) {
  const name = v.scope.tenant + (v.scope.env ? "/" + v.scope.env : "");
  if (v.error) return <p class="error" role="alert">{name}: {v.error}</p>;
  const b = v.budget!;
  const u = v.usage!;
  return (
    <section data-testid="tenant-budget-view" data-scope={name}>
      <h2>Budget of {name}</h2>
      <table>
        <tbody>
          <Limits sb={b.tenant_budget} label={"tenant " + b.tenant} />
          {b.envs.map((e) => <Limits key={e.subject} sb={e} label={"env " + e.subject} />)}
          {b.users.map((m) => <Limits key={m.subject} sb={m} label={m.subject + (m.role === "tenant-admin" ? " (admin)" : "")} />)}
        </tbody>
      </table>
      <h3>Spent since {new Date(u.from).toLocaleDateString()}</h3>
      <table data-testid="tenant-usage">
        <thead>
          <tr><th>user</th><th>calls</th><th>tokens</th><th>cost</th></tr>
        </thead>
        <tbody>
          {u.rows.map((r) => {
            const tokens = r.input_tokens + r.cache_write_5m_tokens + r.cache_write_1h_tokens + r.cache_read_tokens + r.output_tokens;
            return (
              <tr key={r.key.user} data-user={r.key.user} data-calls={r.requests} data-tokens={tokens} data-cost={r.cost_usd}>
                <td>{r.key.user}</td>
                <td>{r.requests.toLocaleString()}</td>
                <td>{tokens.toLocaleString()}</td>
                <td>{fmtUSD(r.cost_usd)}</td>
              </tr>
            );
          })}
          {u.rows.length === 0 && <tr><td colSpan={4} class="muted">nothing spent</td></tr>}
          {u.omitted > 0 && (
            <tr data-testid="tenant-usage-omitted">
              <td colSpan={4} class="muted">
                and {u.omitted.toLocaleString()} more {u.omitted === 1 ? "user" : "users"}; all together {u.total.requests.toLocaleString()} calls, {fmtUSD(u.total.cost_usd)}
              </td>
            </tr>
          )}
        </tbody>
      </table>
    </section>
  );
}

/** TenantBudgetButton opens the view; it shows only to a tenant-admin. */
export function TenantBudgetButton({ me }: { me: Me | null }) {
  const scopes = administered(me);
  if (scopes.length === 0) return null;
  return (
    <button data-testid="tenant-budget-open" onClick={() => {
      // Never the last opening's figures while the new ones load.
      views.value = [];
      open.value = true;
      load(scopes);
    }}>
      Tenant budget
    </button>
  );
}

export function TenantBudgetDialog() {
  if (!open.value) return null;
  return <Dialog />;
}

// Modal like the quick switcher: the focus goes in and stays in, Esc closes
// it without reaching the page (where it would stop the running turn), and
// the focus goes back to the composer.
function Dialog() {
  const box = useRef<HTMLDivElement>(null);
  const closeBtn = useRef<HTMLButtonElement>(null);
  useEffect(() => closeBtn.current?.focus(), []);
  const close = () => {
    open.value = false;
    setTimeout(focusComposer, 0);
  };
  return (
    <div class="switcher-backdrop" onClick={close}>
      <div class="switcher tenant-budget" ref={box} role="dialog" aria-modal="true" aria-label="Tenant budget" data-testid="tenant-budget" onClick={(e) => e.stopPropagation()}
        onKeyDown={(e) => {
          trapTab(e, box.current);
          if (e.key === "Escape") {
            e.preventDefault();
            e.stopPropagation();
            close();
          }
        }}>
        {views.value.length === 0 ? <p class="muted">reading…</p> : views.value.map((v) => <View key={v.scope.tenant + "/" + (v.scope.env ?? "")} v={v} />)}
        <button ref={closeBtn} onClick={close} data-testid="tenant-budget-close">Close</button>
      </div>
    </div>
  );
}
