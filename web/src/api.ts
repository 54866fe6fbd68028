import { signal } from "@preact/signals";
// The browser API's wire types (docs/contract.md) and the calls the UI makes.

export interface ToolEvent {
  id: string;
  name: string;
  input?: unknown;
  output?: string;
  truncated?: boolean;
  is_error?: boolean;
  duration_ms?: number;
}

export interface Usage {
  model: string;
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens?: number;
  cache_read_input_tokens?: number;
}

export interface BudgetDenial {
  kind?: string;
  max_usd?: string;
  used_usd?: string;
  resets_at?: string;
  [k: string]: unknown;
}

export interface Failure {
  code: string;
  message: string;
  retryable: boolean;
  http_status?: number;
  budget?: BudgetDenial;
}

export interface Finish {
  stop_reason: string;
  model_calls: number;
  duration_ms: number;
}

export interface Event {
  seq: number;
  kind: string;
  conversation_id: string;
  turn_id?: string;
  time: string;
  /** The Task call a sub-agent's event belongs to. */
  parent_tool_use_id?: string;
  client_message_id?: string;
  text?: string;
  index?: number;
  tool?: ToolEvent;
  usage?: Usage;
  finish?: Finish;
  failure?: Failure;
  session?: { harness: string; worker_id?: string; messages?: number };
}

export interface SessionState {
  conversation_id: string;
  status: string;
  last_seq: number;
  running_turn_id?: string;
}

export interface Conversation {
  id: string;
  /** "" until the control-plane names it after its first message. */
  title: string;
  created_at: string;
  /** When a message was last sent or a turn last ended: the list's order. */
  last_activity_at?: string;
  archived_at?: string;
  /** In the list: "running" or "idle", as the control-plane knows it. */
  status?: string;
  running_turn_id?: string;
  state?: SessionState;
  worker_error?: string;
}

/** What one turn's model calls used and cost, by the control-plane's ledger. */
export interface TurnUsage {
  turn_id: string;
  calls: number;
  input_tokens: number;
  output_tokens: number;
  cost_usd: string;
  estimated?: boolean;
  /** The call that named the conversation, when it fell in this turn: part of cost_usd, not of calls. */
  title_calls?: number;
  title_cost_usd?: string;
}

/** One conversation the search found, with a snippet of its best matching text. */
export interface SearchResult {
  conversation: Conversation;
  kind: "title" | "user" | "assistant";
  snippet: string;
}

export interface HistoryPage {
  events: Event[];
  first_seq: number;
  last_seq: number;
  has_more: boolean;
  turn_usage?: Record<string, TurnUsage>;
}

/** One of the caller's limits and where they stand (money as exact decimal dollars). */
export interface LimitStatus {
  kind: string;
  max_usd?: string;
  used_usd?: string;
  held_usd?: string;
  remaining_usd?: string;
  max?: number;
  used?: number;
  held?: number;
  remaining?: number;
  window: string;
  resets_at?: string;
}

export interface Issue {
  id: string;
  title: string;
  body: string;
  severity: string;
  labels?: string[];
  status: string;
  created_at: string;
  comments?: { id: string; body: string; status?: string; created_at: string }[];
}

/** One entry of a workspace directory (docs/contract.md, the workspace view). */
export interface WorkspaceEntry {
  name: string;
  kind: "file" | "dir" | "symlink" | "other";
  size?: number;
  mtime: string;
  target?: string;
  target_kind?: string;
  outside?: boolean;
}

export interface WorkspaceListing {
  path: string;
  entries: WorkspaceEntry[];
  truncated?: boolean;
}

export interface WorkspaceFile {
  path: string;
  size: number;
  mtime: string;
  binary?: boolean;
  content?: string;
}

export interface DiffLine {
  kind: "context" | "added" | "removed";
  old_line?: number;
  new_line?: number;
  text: string;
}

export interface WorkspaceDiff {
  path: string;
  created?: boolean;
  deleted?: boolean;
  binary?: boolean;
  context: number;
  hunks: { old_start: number; old_lines: number; new_start: number; new_lines: number; lines: DiffLine[] }[];
}

export interface ToolOutput {
  name: string;
  size: number;
  mtime: string;
  content: string;
  truncated?: boolean;
}

/** loginNeeded is set when the browser API answers 401: the header then offers a login. */
export const loginNeeded = signal(false);

/** Me is who the browser API says the caller is. */
export interface Me {
  user: string;
  via: string;
  memberships?: { tenant: string; env?: string; role: string }[];
}

/** SubjectBudget is a subject's limits and where it stands (figures absent when withheld). */
export interface SubjectBudget {
  scope: string;
  subject: string;
  limits: LimitStatus[];
  withheld?: string;
  role?: string;
}

/** TenantBudget is what a tenant-admin sees of their tenant's (or env's) budget. */
export interface TenantBudget {
  tenant: string;
  env?: string;
  tenant_budget: SubjectBudget;
  envs: SubjectBudget[];
  users: SubjectBudget[];
}

/** UsageReport is the ledger's calls grouped, as the control-plane adds them up. */
export interface UsageReport {
  by: string[];
  from: string;
  rows: { key: Record<string, string>; requests: number; input_tokens: number; cache_write_5m_tokens: number; cache_write_1h_tokens: number; cache_read_tokens: number; output_tokens: number; cost_usd: string }[];
  total: { requests: number; cost_usd: string };
  /** Rows past the report's row limit, which total still counts. */
  omitted: number;
}

/** ApiError is an answer in the contract's error shape, or a network failure (status 0). */
export class ApiError extends Error {
  constructor(
    public status: number,
    public code: string,
    message: string,
    /** seconds the server asked to wait (Retry-After), 0 when it said none */
    public retryAfter = 0,
  ) {
    super(message);
  }
}

async function call<T>(method: string, path: string, body?: unknown): Promise<T> {
  let resp: Response;
  try {
    // A Blob (an attachment) goes as its bytes; anything else as JSON.
    const raw = body instanceof Blob;
    resp = await fetch(path, {
      method,
      headers: body === undefined ? {} : { "Content-Type": raw ? "application/octet-stream" : "application/json" },
      body: body === undefined ? undefined : raw ? body : JSON.stringify(body),
    });
  } catch (e) {
    throw new ApiError(0, "network", "the control-plane is unreachable");
  }
  const text = await resp.text();
  let data: any = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    /* not JSON: reported below */
  }
  if (resp.status === 401) loginNeeded.value = true;
  if (!resp.ok) {
    const err = data?.error;
    const wait = Number(resp.headers.get("Retry-After") ?? "0");
    throw new ApiError(resp.status, err?.code ?? "http_" + resp.status, err?.message ?? `HTTP ${resp.status}`, Number.isFinite(wait) ? wait : 0);
  }
  return data as T;
}

const conv = (id: string) => "/api/conversations/" + encodeURIComponent(id);

export const api = {
  me: () => call<Me>("GET", "/api/me"),
  // The session ends on the server; the cookie is deleted by its answer.
  logout: () => call<null>("POST", "/auth/logout"),
  list: (archived = false) => call<{ conversations: Conversation[] }>("GET", "/api/conversations" + (archived ? "?archived=1" : "")),
  update: (id: string, change: { title?: string; archived?: boolean }) => call<Conversation>("PATCH", conv(id), change),
  budget: () => call<{ limits: LimitStatus[] }>("GET", "/api/me/budget"),
  search: (q: string) => call<{ results: SearchResult[] }>("GET", "/api/search?q=" + encodeURIComponent(q)),
  tenantBudget: (tenant: string, env?: string) =>
    call<TenantBudget>("GET", "/api/tenants/" + encodeURIComponent(tenant) + "/budget" + (env ? "?env=" + encodeURIComponent(env) : "")),
  tenantUsage: (tenant: string, env?: string) =>
    call<UsageReport>("GET", "/api/tenants/" + encodeURIComponent(tenant) + "/usage/report?by=user" + (env ? "&env=" + encodeURIComponent(env) : "")),
  turnUsage: (id: string, turn: string) => call<TurnUsage>("GET", conv(id) + "/turns/" + encodeURIComponent(turn) + "/usage"),
  create: (title?: string) => call<Conversation>("POST", "/api/conversations", title ? { title } : {}),
  get: (id: string) => call<Conversation>("GET", conv(id)),
  send: (id: string, text: string, clientMessageId: string, attachments?: string[]) =>
    call<{ turn_id: string; seq: number; duplicate?: boolean }>("POST", conv(id) + "/messages", {
      text,
      client_message_id: clientMessageId,
      ...(attachments?.length ? { attachments } : {}),
    }),
  attach: (id: string, name: string, file: Blob) =>
    call<{ path: string; size: number; media_type?: string }>("POST", conv(id) + "/attachments?name=" + encodeURIComponent(name), file),
  interrupt: (id: string) => call<{ interrupted: boolean }>("POST", conv(id) + "/interrupt"),
  history: (id: string, before: number | null, limit: number) =>
    call<HistoryPage>(
      "GET",
      conv(id) + "/events?limit=" + limit + (before != null ? "&before=" + before : ""),
    ),
  issues: (id: string) => call<{ issues: Issue[] }>("GET", conv(id) + "/issues"),
  streamURL: (id: string, after: number) => conv(id) + "/stream?after=" + after,
  workspaceList: (id: string, path: string) => call<WorkspaceListing>("GET", workspaceURL(id, "list", path)),
  workspaceFile: (id: string, path: string) => call<WorkspaceFile>("GET", workspaceURL(id, "file", path)),
  workspaceDiff: (id: string, path: string) => call<WorkspaceDiff>("GET", workspaceURL(id, "diff", path)),
  toolOutput: (id: string, name: string) => call<ToolOutput>("GET", toolOutputURL(id, name)),
};

/** workspaceURL addresses the workspace view; download=1 makes a file an attachment. */
export function workspaceURL(id: string, what: "list" | "file" | "diff", path: string): string {
  return conv(id) + "/workspace/" + what + "?path=" + encodeURIComponent(path);
}

export function toolOutputURL(id: string, name: string): string {
  return conv(id) + "/tool-output?name=" + encodeURIComponent(name);
}

/** newID makes a client_message_id: the contract's id alphabet, 128 random bits. */
export function newID(prefix: string): string {
  const b = new Uint8Array(16);
  crypto.getRandomValues(b);
  return prefix + Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}
