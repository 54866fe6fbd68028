// Plain words for the wire's identifiers. The raw name stays in data-*
// attributes and tooltips: tests and curious users can still see it.

const cap = (s: string) => s.charAt(0).toUpperCase() + s.slice(1);
const words = (s: string) => s.replace(/[-_]+/g, " ").trim();

/** toolLabel: "mcp__talkide-issue-tracking__create_issue" → "Issue tracking · create issue". */
export function toolLabel(name: string): string {
  const m = /^mcp__(.+?)__(.+)$/.exec(name);
  if (!m) return name;
  // Our own MCP servers carry the product's prefix, which says nothing here.
  return cap(words(m[1].replace(/^talkide-/, ""))) + " · " + words(m[2]);
}

const stopReasons: Record<string, string> = {
  end_turn: "finished",
  max_tokens: "stopped at the output limit",
  stop_sequence: "stopped at a stop sequence",
  tool_use: "stopped for a tool call",
  pause_turn: "paused",
  refusal: "the model refused",
};

export function stopReason(r: string | undefined): string {
  if (!r) return "finished";
  return stopReasons[r] ?? words(r);
}

const failures: Record<string, string> = {
  interrupted: "Stopped",
  worker_restarted: "The worker restarted",
  rate_limited: "Rate limited",
  overloaded: "Model API overloaded",
  budget_exhausted: "Budget limit reached",
  model_error: "Model API error",
  gateway_auth: "Gateway refused the worker",
  max_turns: "Model-call limit reached",
  internal: "Internal error",
};

export function failureTitle(code: string): string {
  return failures[code] ?? cap(words(code));
}
