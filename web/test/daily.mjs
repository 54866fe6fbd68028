// Scenarios for what a day of use in Chromium turned up (cmd/talkide
// browser_daily_test.go): the follow rule, phones, the tab title, copy,
// retry and edit-and-resend, Esc and the quick switcher, and smaller
// things. Merged into scenarios.mjs's map. Where layout matters a
// scenario runs at both sizes users had: a laptop and a phone.

export const T = 30_000;
export const DESKTOP = { width: 1280, height: 800 };
export const PHONE = { width: 390, height: 844 };
const sizes = [["desktop", DESKTOP], ["phone", PHONE]];

export function check(cond, msg) {
  if (!cond) throw new Error(msg);
}

/** create makes a conversation through the API (the same at every width). */
export async function create(h, title) {
  if (!h.page.url().startsWith(h.base)) await h.page.goto(h.base + "/");
  const c = await h.page.evaluate(async (title) => {
    const r = await fetch("/api/conversations", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(title ? { title } : {}) });
    return r.json();
  }, title);
  await h.page.goto(h.base + "/c/" + c.id);
  await h.page.locator("[data-testid=conn][data-state=live]").waitFor({ timeout: T });
  return c.id;
}

export async function send(h, text) {
  const box = h.page.getByTestId("composer");
  await box.fill(text);
  await box.press("Enter");
}

const footers = (h) => h.page.locator(".turn-footer");
export async function turnEnds(h, n, timeout = T) {
  await footers(h).nth(n - 1).waitFor({ timeout });
}

/** lastFooterInView waits (briefly: the view catches up within a frame or
 * two) for the last turn footer to be wholly inside the transcript. */
async function lastFooterInView(h, what) {
  const ok = await h.page.waitForFunction(() => {
    const sc = document.querySelector("[data-testid=transcript]");
    const all = document.querySelectorAll(".turn-footer");
    const f = all[all.length - 1];
    if (!sc || !f) return false;
    const a = sc.getBoundingClientRect(), b = f.getBoundingClientRect();
    return b.top >= a.top - 1 && b.bottom <= a.bottom + 1;
  }, null, { timeout: 3000 }).then(() => true, () => false);
  if (!ok) {
    const d = await h.page.evaluate(() => {
      const sc = document.querySelector("[data-testid=transcript]");
      return { scrollTop: sc.scrollTop, scrollHeight: sc.scrollHeight, clientHeight: sc.clientHeight };
    });
    throw new Error(`${what}: the turn's end is not in view (${JSON.stringify(d)}; jump shown: ${await h.page.getByTestId("jump").count()})`);
  }
}

/** growthScrolls fires a scroll event whenever the transcript's content
 * changes, before the page catches up with it: what a browser does when a
 * scroll event lands between content growing and the view following (70 px
 * from the bottom, say). The follow rule must not take it for the reader. */
async function growthScrolls(h) {
  await h.page.evaluate(() => {
    const sc = document.querySelector("[data-testid=transcript]");
    const inner = document.querySelector("[data-testid=transcript-items]");
    new MutationObserver(() => sc.dispatchEvent(new Event("scroll"))).observe(inner, { childList: true, subtree: true, characterData: true });
  });
}

function contrast(a, b) {
  const lum = (rgb) => {
    const c = rgb.map((v) => v / 255).map((v) => (v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4));
    return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
  };
  const x = lum(a), y = lum(b);
  return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05);
}

/** noHorizontalOverflow: nothing makes the page wider than the window. */
async function noHorizontalOverflow(h, what) {
  const o = await h.page.evaluate(() => {
    const w = window.innerWidth;
    const wide = [...document.querySelectorAll("header *, main *, .drawer *")].filter((e) => {
      const r = e.getBoundingClientRect();
      if (r.width === 0 || r.right <= w + 1) return false;
      // Inside a box that scrolls sideways on its own (code, tables) is fine.
      for (let p = e.parentElement; p; p = p.parentElement) {
        const ox = getComputedStyle(p).overflowX;
        if ((ox === "auto" || ox === "scroll" || ox === "hidden") && p.getBoundingClientRect().right <= w + 1) return false;
      }
      return true;
    }).slice(0, 5).map((e) => e.tagName + "." + e.className + " right=" + Math.round(e.getBoundingClientRect().right));
    return { doc: document.documentElement.scrollWidth, w, wide };
  });
  check(o.doc <= o.w && o.wide.length === 0, `${what}: wider than the window (${o.doc} > ${o.w}): ${o.wide.join(", ")}`);
}

async function inViewport(h, locator, what) {
  const b = await locator.boundingBox();
  const vp = h.page.viewportSize();
  check(b && (await locator.isVisible()), `${what} is not visible`);
  check(b.x >= 0 && b.y >= 0 && b.x + b.width <= vp.width + 1 && b.y + b.height <= vp.height + 1,
    `${what} is outside the ${vp.width}×${vp.height} window: ${JSON.stringify(b)}`);
}

const longBash = (tag, n) => `[[tool:Bash {"command":"for i in $(seq 1 ${n}); do echo ${tag}-line-$i; done"}]]`;

export const daily = {
  // The workspace: a turn in which the agent makes a file with a command,
  // edits it, writes another and runs a command with a long output; the
  // Files tab shows the tree, a file opens highlighted with line numbers
  // and downloads as an attachment, a change opens its diff with context
  // and line numbers, and the tool card opens the output kept whole. At a
  // laptop's size, then a phone's, where the panel is in the drawer.
  async workspace(h) {
    for (const [size, vp] of sizes) {
      await h.page.setViewportSize(vp);
      await create(h, "workspace " + size);
      const tool = (name, input) => `[[tool:${name} ${JSON.stringify(input)}]]`;
      await send(h, "Make, edit and run. " +
        tool("Bash", { command: "seq -f 'line %g' 1 12 > data.txt" }) + " " +
        tool("Edit", { file_path: "data.txt", old_string: "line 6\n", new_string: "line six\n" }) + " " +
        tool("Write", { file_path: "src/app.go", content: 'package main\n\n// main says which.\nfunc main() {\n\tprintln("two")\n}\n' }) + " " +
        tool("Bash", { command: "seq 1 40000" }));
      await turnEnds(h, 1, 60_000);
      const panel = async () => {
        if (size === "phone") {
          await h.page.getByTestId("menu").click();
          await h.page.getByTestId("drawer-close").waitFor({ timeout: T });
        }
      };
      const viewer = h.page.getByTestId("viewer");
      const closeViewer = async () => {
        await h.page.keyboard.press("Escape");
        await viewer.waitFor({ state: "hidden", timeout: T });
      };

      // The tree, and a file in the viewer.
      await panel();
      await h.page.getByTestId("files-tab").click();
      await h.page.locator('[data-testid=tree-file]').filter({ hasText: "data.txt" }).waitFor({ timeout: T });
      await h.page.locator('[data-testid=tree-dir]').filter({ hasText: "src/" }).click();
      await h.page.locator('li[data-path="src/app.go"] [data-testid=tree-file]').waitFor({ timeout: T });
      await h.screenshot("workspace-tree-" + size);
      await h.page.locator('li[data-path="src/app.go"] [data-testid=tree-file]').click();
      await viewer.waitFor({ timeout: T });
      check((await viewer.getAttribute("data-kind")) === "file", "the viewer does not show a file");
      const code = viewer.getByTestId("viewer-code");
      await code.waitFor({ timeout: T });
      check((await code.textContent()).includes('println("two")'), "the viewer does not show the file's content: " + (await code.textContent()));
      check((await code.getAttribute("data-lines")) === "6", "the file has 6 lines, the viewer says " + (await code.getAttribute("data-lines")));
      check((await viewer.getByTestId("viewer-gutter").textContent()) === "1\n2\n3\n4\n5\n6", "the line numbers are wrong");
      check((await viewer.locator(".hljs-keyword").count()) > 0, "the Go file is not highlighted");
      await inViewport(h, viewer.getByTestId("viewer-close"), "the viewer's Close at " + size);
      await inViewport(h, viewer.getByTestId("viewer-download"), "the viewer's Download at " + size);
      const dl = await viewer.getByTestId("viewer-download").getAttribute("href");
      const got = await h.page.evaluate(async (u) => {
        const r = await fetch(u);
        return { status: r.status, type: r.headers.get("content-type"), disp: r.headers.get("content-disposition"), nosniff: r.headers.get("x-content-type-options"), body: await r.text() };
      }, dl);
      check(got.status === 200 && got.type === "text/plain; charset=utf-8" && /^attachment; filename="?app\.go"?$/.test(got.disp) && got.nosniff === "nosniff" && got.body.includes('println("two")'),
        "the download: " + JSON.stringify(got));
      await h.screenshot("workspace-file-" + size);
      await closeViewer();

      // A change opens its diff: context around it, line numbers on both sides.
      if (size === "phone" && !(await h.page.getByTestId("changes-tab").isVisible())) await panel();
      await h.page.getByTestId("changes-tab").click();
      await h.page.locator('[data-testid=change][data-path="data.txt"]').click();
      await viewer.waitFor({ timeout: T });
      const diff = viewer.getByTestId("viewer-diff");
      await diff.waitFor({ timeout: T });
      const rows = await diff.locator("tr.dl").evaluateAll((trs) => trs.map((r) => [r.dataset.kind, r.dataset.old ?? "", r.dataset.new ?? "", r.querySelector(".text").textContent].join("|")));
      const want = ["context|3|3|line 3", "context|4|4|line 4", "context|5|5|line 5", "removed|6||line 6", "added||6|line six", "context|7|7|line 7", "context|8|8|line 8", "context|9|9|line 9"];
      check(JSON.stringify(rows) === JSON.stringify(want), "the diff's rows: " + JSON.stringify(rows));
      check((await diff.locator(".hunk-head").textContent()).includes("−3,7 +3,7"), "the hunk's head: " + (await diff.locator(".hunk-head").textContent()));
      await inViewport(h, viewer.getByTestId("viewer-close"), "the diff's Close at " + size);
      await h.screenshot("workspace-diff-" + size);
      await closeViewer();
      // A file the conversation created: all of it added, numbered.
      if (size === "phone" && !(await h.page.getByTestId("changes-tab").isVisible())) await panel();
      await h.page.locator('[data-testid=change][data-path="src/app.go"]').click();
      await viewer.getByTestId("viewer-diff").waitFor({ timeout: T });
      const added = await viewer.locator("tr.dl[data-kind=added]").count();
      check(added === 6 && (await viewer.locator("tr.dl[data-new='6'] .text").textContent()) === "}", "the created file's diff: " + added + " added lines");
      await closeViewer();
      if (size === "phone" && (await h.page.getByTestId("drawer-close").isVisible())) await h.page.getByTestId("drawer-close").click();

      // The long output the tool kept whole.
      const card = h.page.locator("[data-kind=tool][data-tool=Bash]").filter({ hasText: "seq 1 40000" });
      const open = card.getByTestId("open-spilled");
      await open.scrollIntoViewIfNeeded();
      await open.click();
      await viewer.waitFor({ timeout: T });
      check((await viewer.getAttribute("data-kind")) === "output", "the viewer does not show an output");
      const out = viewer.getByTestId("viewer-code");
      await out.waitFor({ timeout: T });
      check((await out.getAttribute("data-lines")) === "40000", "the kept output has 40000 lines, the viewer shows " + (await out.getAttribute("data-lines")));
      check((await out.locator("pre.code").textContent()).endsWith("39999\n40000\n"), "the kept output's end is missing");
      await inViewport(h, viewer.getByTestId("viewer-close"), "the output's Close at " + size);
      await h.screenshot("workspace-output-" + size);
      await closeViewer();
      check((await h.page.locator(".turn-footer[data-code=interrupted]").count()) === 0, "Esc on the viewer stopped a turn");
      await noHorizontalOverflow(h, "the page at " + size + " after the viewer");
    }
  },

  // A message to a worker running the most turns it takes is refused
  // before its turn starts (worker_busy): the page says why and sends it
  // again by itself when the worker has room, once.
  async busy(h) {
    await h.page.setViewportSize(DESKTOP);
    await create(h);
    await send(h, "Wait for the other conversation.");
    const banner = h.page.locator(".error.banner");
    await banner.waitFor({ timeout: T });
    const said = await banner.textContent();
    check(/most turns/.test(said), "the refusal said: " + said);
    await h.step("free");
    await turnEnds(h, 1, 60_000);
    await banner.waitFor({ state: "detached", timeout: T });
    const users = await h.page.locator(".msg.user").count();
    check(users === 1, `the message shows ${users} times`);
    h.result({ said });
  },

  // The transcript follows a long run to the end of every turn, also when
  // scroll events fire while content grows; the reader's own scrolling up
  // lets go, a message of one's own comes back, and "Jump to latest" never
  // covers the last line.
  async follow(h) {
    const out = {};
    for (const [name, size] of sizes) {
      await h.page.setViewportSize(size);
      const id = await create(h);
      await growthScrolls(h);
      const turns = 10;
      for (let i = 1; i <= turns; i++) {
        await send(h, `Turn ${i}: list things.\n\nOne more line for this message. ` + longBash("t" + i, 120) + " " + longBash("u" + i, 60));
        await turnEnds(h, i);
        await lastFooterInView(h, `${name}, turn ${i}`);
      }
      await h.screenshot(name + "-after-10-turns");
      // An interrupted turn: its footer and hint are in view.
      await send(h, 'Stop me. [[tool:Bash {"command":"echo started; sleep 60"}]]');
      await h.page.locator("[data-kind=tool][data-state=running] [data-testid=tool-output]").filter({ hasText: "started" }).waitFor({ timeout: T });
      await h.page.getByTestId("composer").press("Escape");
      await h.page.locator(".turn-footer[data-code=interrupted]").waitFor({ timeout: T });
      await lastFooterInView(h, `${name}, the interrupted turn`);
      // A budget the operator runs out: that footer is in view too.
      await h.step("exhaust-budget");
      await send(h, "Spend more. " + longBash("b", 40));
      await h.page.locator(".turn-footer[data-code=budget_exhausted]").waitFor({ timeout: T });
      await lastFooterInView(h, `${name}, the turn a budget stopped`);
      await h.screenshot(name + "-budget-footer");
      await h.step("restore-budget");

      // The reader scrolls up while a turn streams: the view stays put.
      await send(h, "Slowly now. " + '[[tool:Bash {"command":"for i in $(seq 1 16); do echo slow-$i; sleep 0.25; done"}]]');
      await h.page.locator("[data-kind=tool][data-state=running] [data-testid=tool-output]").filter({ hasText: "slow-2" }).waitFor({ timeout: T });
      const sc = h.page.getByTestId("transcript");
      const box = await sc.boundingBox();
      await h.page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
      await h.page.mouse.wheel(0, -700);
      await h.page.getByTestId("jump").waitFor({ timeout: T });
      const top0 = await sc.evaluate((e) => e.scrollTop);
      await turnEnds(h, turns + 3);
      await h.page.waitForTimeout(300);
      const top1 = await sc.evaluate((e) => e.scrollTop);
      check(Math.abs(top1 - top0) < 2, `${name}: the view moved from ${top0} to ${top1} while the reader was scrolled up`);
      // At the very end, with the button showing, the last line is above it.
      await sc.evaluate((e) => (e.scrollTop = e.scrollHeight));
      await h.page.waitForTimeout(100);
      const cover = await h.page.evaluate(() => {
        const j = document.querySelector("[data-testid=jump]");
        const items = document.querySelector("[data-testid=transcript-items]");
        const last = items.lastElementChild;
        if (!j || !last) return { jump: !!j };
        return { jump: true, jumpTop: j.getBoundingClientRect().top, lastBottom: last.getBoundingClientRect().bottom };
      });
      check(cover.jump, `${name}: "Jump to latest" went away without the reader going back to the end`);
      check(cover.lastBottom <= cover.jumpTop, `${name}: "Jump to latest" covers the last line (${JSON.stringify(cover)})`);
      await h.screenshot(name + "-jump-clear-of-last-line");
      // Scrolled up again, a message of one's own brings the view to the end.
      await h.page.mouse.wheel(0, -700);
      await h.page.getByTestId("jump").waitFor({ timeout: T });
      await send(h, "Back to the end with my own message. " + longBash("own", 80));
      await turnEnds(h, turns + 4);
      await lastFooterInView(h, `${name}, after a message of one's own`);
      check((await h.page.getByTestId("jump").count()) === 0, `${name}: "Jump to latest" still shows after sending`);
      out[name] = id;
    }
    h.result(out);
  },

  // A phone: the page fits 390 px, Send and Stop stay on screen, and the
  // menu reaches the conversations, a new one, Changes and Issues; in
  // between (900 px) the menu reaches the panel; on a laptop it is all
  // in view without a menu.
  async phone(h) {
    await h.page.setViewportSize(PHONE);
    const id = await create(h);
    await h.page.getByTestId("budget").waitFor({ timeout: T });
    await noHorizontalOverflow(h, "the phone page");
    const code = "```sh\n" + "echo " + "a-very-long-argument-".repeat(12) + "\n```\n\n| column one | column two | column three | column four |\n|---|---|---|---|\n| " + "cell ".repeat(6) + " | b | c | d |";
    await send(h, 'Edit and file. [[tool:Write {"file_path":"notes.txt","content":"alpha\\n"}]] [[tool:mcp__talkide-issue-tracking__report_issue {"title":"Phone issue","body":"Seen on a phone.","severity":"low"}]]\n\n' + code);
    await turnEnds(h, 1);
    await noHorizontalOverflow(h, "the phone page with code, a table and tool cards");
    const box = h.page.getByTestId("composer");
    await box.fill("A long message that takes a few lines on a narrow screen. ".repeat(6));
    await inViewport(h, h.page.getByTestId("send"), "Send");
    await h.screenshot("phone-send");
    await box.fill('Wait a bit. [[tool:Bash {"command":"echo started; sleep 60"}]]');
    await box.press("Enter");
    await h.page.locator("[data-kind=tool][data-state=running] [data-testid=tool-output]").filter({ hasText: "started" }).waitFor({ timeout: T });
    await box.fill("Typed while it runs. ".repeat(10));
    await inViewport(h, h.page.getByTestId("stop"), "Stop");
    await inViewport(h, h.page.getByTestId("send"), "Send (Queue)");
    await noHorizontalOverflow(h, "the phone page while a turn runs");
    await h.screenshot("phone-stop");
    await box.fill("");

    // The menu: the conversation list, a new conversation, Changes, Issues.
    await inViewport(h, h.page.getByTestId("menu"), "the menu button");
    await h.page.getByTestId("menu").click();
    await h.page.waitForFunction(() => document.activeElement?.getAttribute("data-testid") === "drawer-close", null, { timeout: 3000 })
      .catch(() => { throw new Error("the focus did not move into the opened drawer"); });
    const row = h.page.locator(`li[data-conversation="${id}"]`);
    await inViewport(h, row, "the open conversation in the list");
    await inViewport(h, h.page.getByTestId("new-conversation"), "New conversation");
    await h.page.getByTestId("changes").filter({ hasText: "notes.txt" }).waitFor({ timeout: T });
    await h.page.getByTestId("issues-tab").click();
    await h.page.getByTestId("issues").filter({ hasText: "Phone issue" }).waitFor({ timeout: T });
    await noHorizontalOverflow(h, "the phone page with the drawer open");
    await h.screenshot("phone-drawer");
    // Esc closes the drawer, and only the drawer.
    await h.page.keyboard.press("Escape");
    await row.waitFor({ state: "hidden", timeout: T });
    await h.page.waitForTimeout(300);
    check((await h.page.locator(".turn-footer").count()) === 1, "Esc on the drawer stopped the turn");
    await h.page.getByTestId("stop").click();
    await h.page.locator(".turn-footer[data-code=interrupted]").waitFor({ timeout: T });
    // A new conversation from the drawer.
    await h.page.getByTestId("menu").click();
    const created = h.page.waitForResponse((r) => r.url().endsWith("/api/conversations") && r.request().method() === "POST");
    await h.page.getByTestId("new-conversation").click();
    const other = (await (await created).json()).id;
    await h.page.waitForURL((u) => u.pathname === "/c/" + other, { timeout: T });
    await h.page.getByTestId("new-conversation").waitFor({ state: "hidden", timeout: T });
    await inViewport(h, h.page.getByTestId("composer"), "the composer of the new conversation");
    // And back to the first one from the list.
    await h.page.getByTestId("menu").click();
    await row.locator("a").click();
    await h.page.waitForURL((u) => u.pathname === "/c/" + id, { timeout: T });

    // Between phone and laptop: the list shows, the panel is behind the menu.
    await h.page.setViewportSize({ width: 900, height: 800 });
    await h.page.getByTestId("changes").waitFor({ state: "hidden", timeout: T });
    await h.page.getByTestId("menu").click();
    await h.page.getByTestId("changes-tab").click();
    await h.page.getByTestId("changes").filter({ hasText: "notes.txt" }).waitFor({ timeout: T });
    await inViewport(h, h.page.getByTestId("issues-tab"), "the Issues tab at 900 px");
    await h.screenshot("tablet-panel");
    await h.page.getByTestId("drawer-close").click();
    await h.page.getByTestId("changes").waitFor({ state: "hidden", timeout: T });
    await noHorizontalOverflow(h, "the page at 900 px");
    await h.screenshot("tablet");
    await h.page.setViewportSize({ width: 720, height: 800 });
    await noHorizontalOverflow(h, "the page at 720 px");
    await h.screenshot("narrow-tablet");

    await h.page.setViewportSize(DESKTOP);
    check(!(await h.page.getByTestId("menu").isVisible()), "the menu button shows on a laptop");
    await inViewport(h, h.page.getByTestId("changes"), "Changes on a laptop");
    await inViewport(h, row, "the list on a laptop");
    await noHorizontalOverflow(h, "the laptop page");
    await h.screenshot("desktop");
    h.result({ conversation: id, other });
  },

  // The tab's title is the open conversation's, and follows a rename and
  // a switch.
  async title(h) {
    const a = await create(h, "Alpha plans");
    await h.page.waitForFunction(() => document.title.includes("Alpha plans"), null, { timeout: T });
    const b = await create(h, "Beta notes");
    await h.page.waitForFunction(() => document.title.includes("Beta notes"), null, { timeout: T });
    await h.page.locator(`li[data-conversation="${a}"] a`).click();
    await h.page.waitForFunction(() => document.title.includes("Alpha plans"), null, { timeout: T });
    const row = h.page.locator(`li[data-conversation="${a}"]`);
    await row.getByTestId("rename").click();
    await row.getByTestId("rename-input").fill("Alpha, renamed");
    await row.getByTestId("rename-input").press("Enter");
    await h.page.waitForFunction(() => document.title.includes("Alpha, renamed"), null, { timeout: T });
    h.result({ title: await h.page.title(), a, b });
  },

  // Copy on code blocks and messages, with "Copied"; editing the last
  // message sends the edit as a new one and marks the earlier one, also
  // after a reload; Retry after an overloaded turn resends its message
  // (last: the simulator would see the failed message in every later turn).
  async copyretryedit(h) {
    await h.ctx.grantPermissions(["clipboard-read", "clipboard-write"], { origin: h.base });
    const clip = () => h.page.evaluate(() => navigator.clipboard.readText());
    const out = {};
    for (const [name, size] of sizes) {
      await h.page.setViewportSize(size);
      const id = await create(h);
      const code = 'fmt.Println("copied")';
      await send(h, "Some code:\n\n```go\n" + code + "\n```");
      await turnEnds(h, 1);
      const reply = h.page.locator(".msg-wrap.assistant").last();
      const codeCopy = reply.getByTestId("copy-code");
      await inViewport(h, codeCopy, `${name}: the code block's Copy`);
      await codeCopy.click();
      await reply.locator("[data-testid=copy-code][data-copied='1']").filter({ hasText: "Copied" }).waitFor({ timeout: T });
      check((await clip()).trim() === code, `${name}: the code block copied as ${JSON.stringify(await clip())}`);
      await h.screenshot(name + "-code-copied");
      await reply.locator(".msg-actions [data-testid=copy]").click();
      await reply.locator(".msg-actions [data-testid=copy][data-copied='1']").filter({ hasText: "Copied" }).waitFor({ timeout: T });
      const replyText = await clip();
      check(replyText.includes("[simulator]") && replyText.includes("```go"), `${name}: the reply copied as ${JSON.stringify(replyText)}`);
      const mine = h.page.locator(".msg-wrap.user").last();
      await mine.getByTestId("copy").click();
      await mine.locator("[data-testid=copy][data-copied='1']").waitFor({ timeout: T });
      check((await clip()) === "Some code:\n\n```go\n" + code + "\n```", `${name}: my message copied as ${JSON.stringify(await clip())}`);

      // Edit and resend the last message.
      await send(h, "first draft");
      await turnEnds(h, 2);
      const last = h.page.locator(".msg-wrap.user").last();
      await last.getByTestId("edit").click();
      await h.page.getByTestId("edit-input").fill("second draft");
      await h.screenshot(name + "-editing");
      await h.page.getByTestId("edit-send").click();
      await turnEnds(h, 3);
      const marks = async () => h.page.locator("[data-kind='user.message']").evaluateAll((els) =>
        els.slice(-2).map((e) => ({ text: e.textContent.trim(), superseded: e.dataset.superseded, edited: e.dataset.edited })));
      const check2 = async (when) => {
        const m = await marks();
        check(m[0].text === "first draft" && m[0].superseded === "1" && m[1].text === "second draft" && m[1].edited === "1",
          `${name} ${when}: the last two messages are ${JSON.stringify(m)}`);
        check((await h.page.getByTestId("superseded").count()) === 1 && (await h.page.getByTestId("edited").count()) === 1, `${name} ${when}: the marks are not shown`);
      };
      await check2("after the edit");
      await h.screenshot(name + "-edited");
      await h.page.reload();
      await turnEnds(h, 3);
      await check2("after a reload");
      const echoed = await h.page.locator("[data-kind=text]").last().textContent();
      check(echoed.includes("second draft"), `${name}: the edited message's turn answered "${echoed}"`);

      // Retry after an overloaded model API.
      const failing = "Try this [[error:529]]";
      await send(h, failing);
      await h.page.locator(".turn-footer[data-code=overloaded]").waitFor({ timeout: 60_000 });
      const retry = h.page.getByTestId("retry");
      await inViewport(h, retry, `${name}: Retry`);
      await h.screenshot(name + "-retry");
      await retry.click();
      await h.page.locator(".turn-footer[data-code=overloaded]").nth(1).waitFor({ timeout: 60_000 });
      await h.screenshot(name + "-retried");
      const users = await h.page.locator("[data-kind='user.message']").allTextContents();
      check(users.filter((u) => u.trim() === failing).length === 2, `${name}: after Retry the messages are ${JSON.stringify(users)}`);
      check((await h.page.getByTestId("retry").count()) === 1, `${name}: Retry is offered on more than the last failed turn`);

      // Only the last message offers Edit.
      check((await h.page.getByTestId("edit").count()) === 1, "Edit is offered on more than the last message");
      out[name] = id;
    }
    h.result(out);
  },

  // Ctrl+K while a turn runs: a modal dialog that keeps Tab; Esc closes it
  // without stopping the turn and gives the composer the focus back; Esc
  // then stops the turn.
  async dialog(h) {
    const interrupts = [];
    h.page.on("request", (r) => r.url().endsWith("/interrupt") && interrupts.push(r.url()));
    const out = {};
    for (const [name, size] of sizes) {
      await h.page.setViewportSize(size);
      const id = await create(h, "Dialog " + name);
      await send(h, 'Keep going. [[tool:Bash {"command":"echo started; sleep 60"}]]');
      await h.page.locator("[data-kind=tool][data-state=running] [data-testid=tool-output]").filter({ hasText: "started" }).waitFor({ timeout: T });
      await h.page.keyboard.press("Control+k");
      const dlg = h.page.getByTestId("switcher");
      await dlg.waitFor({ timeout: T });
      check((await dlg.getAttribute("role")) === "dialog" && (await dlg.getAttribute("aria-modal")) === "true", `${name}: the switcher is not a modal dialog`);
      for (const key of ["Tab", "Tab", "Tab", "Shift+Tab", "Shift+Tab", "Shift+Tab", "Shift+Tab"]) {
        await h.page.keyboard.press(key);
        check(await dlg.evaluate((d) => d.contains(document.activeElement)), `${name}: ${key} took the focus out of the dialog`);
      }
      await h.screenshot(name + "-switcher");
      const before = interrupts.length;
      await h.page.keyboard.press("Escape");
      await dlg.waitFor({ state: "detached", timeout: T });
      await h.page.waitForTimeout(500);
      check(interrupts.length === before, `${name}: Esc on the dialog stopped the turn`);
      check((await h.page.locator("[data-kind=tool]").getAttribute("data-state")) === "running", `${name}: the turn is not running after Esc on the dialog`);
      await h.page.waitForFunction(() => document.activeElement?.getAttribute("data-testid") === "composer", null, { timeout: 3000 })
        .catch(() => { throw new Error(`${name}: the focus did not come back to the composer`); });
      await h.page.keyboard.press("Escape");
      await h.page.locator(".turn-footer[data-code=interrupted]").waitFor({ timeout: T });
      check(interrupts.length === before + 1, `${name}: Esc with no dialog did not stop the turn`);
      out[name] = id;
    }
    h.result(out);
  },

  // A fresh install: a composer ready to start, a status that says so; the
  // first message starts a conversation.
  async fresh(h) {
    for (const [name, size] of [["phone", PHONE], ["desktop", DESKTOP]]) {
      await h.page.setViewportSize(size);
      await h.page.goto(h.base + "/");
      const box = h.page.getByTestId("composer");
      await box.waitFor({ timeout: T });
      await inViewport(h, box, `${name}: the composer`);
      await inViewport(h, h.page.getByTestId("send"), `${name}: Send`);
      check(await box.evaluate((e) => e === document.activeElement), `${name}: the composer does not have the focus`);
      const pill = h.page.getByTestId("conn");
      await pill.filter({ hasText: "ready" }).waitFor({ timeout: T });
      check(!(await h.page.getByText("No conversation open").count()), `${name}: "No conversation open"`);
      await noHorizontalOverflow(h, `${name}: the fresh page`);
      await h.screenshot(name + "-fresh");
    }
    await send(h, "Hello from a fresh install.");
    await h.page.waitForURL((u) => u.pathname.startsWith("/c/"), { timeout: T });
    await turnEnds(h, 1);
    const mine = await h.page.locator("[data-kind='user.message']").allTextContents();
    check(mine.length === 1 && mine[0].includes("Hello from a fresh install."), `the messages: ${JSON.stringify(mine)}`);
    await h.page.locator("[data-testid=conn][data-state=live]").waitFor({ timeout: T });
    await h.screenshot("desktop-started");
    h.result({ conversation: new URL(h.page.url()).pathname.slice(3) });
  },

  // Tool cards remember being open across a reload; a running card counts
  // its seconds; raw names read as words; user messages are Markdown,
  // sanitized; tables and quotes are styled; highlighted code is readable.
  async details(h) {
    await h.page.emulateMedia({ colorScheme: "light" });
    const out = {};
    for (const [name, size] of sizes) {
      await h.page.setViewportSize(size);
      const id = await create(h);
      await send(h, 'Two steps. [[tool:Bash {"command":"echo first; sleep 3"}]] [[tool:Bash {"command":"echo second"}]]');
      const first = h.page.locator("[data-kind=tool][data-tool=Bash]").first();
      await first.locator("[data-testid=tool-output]").filter({ hasText: "first" }).waitFor({ timeout: T });
      const el = first.getByTestId("tool-elapsed");
      await el.waitFor({ timeout: T });
      const s0 = Number(await el.getAttribute("data-seconds"));
      await h.page.waitForTimeout(1600);
      const s1 = Number(await el.getAttribute("data-seconds"));
      check(s1 > s0 && /^\d+ s$/.test((await el.textContent()).trim()), `${name}: the running card's timer went from ${s0} to ${s1} ("${await el.textContent()}")`);
      await h.screenshot(name + "-elapsed");
      await turnEnds(h, 1);
      // The user closes the second card; the first stays as it was, open.
      const second = h.page.locator("[data-kind=tool][data-tool=Bash]").nth(1);
      check(await first.evaluate((d) => d.open) && await second.evaluate((d) => d.open), `${name}: the cards were not open live`);
      await second.locator("summary").click();
      check(!(await second.evaluate((d) => d.open)), `${name}: the second card did not close`);
      await h.page.reload();
      await turnEnds(h, 1);
      check(await first.evaluate((d) => d.open), `${name}: the card open while live is closed after a reload`);
      check(!(await second.evaluate((d) => d.open)), `${name}: the card the user closed is open after a reload`);

      // Names and stop reasons in words.
      await send(h, 'File it. [[tool:mcp__talkide-issue-tracking__report_issue {"title":"Named","body":"b","severity":"low"}]]');
      await turnEnds(h, 2);
      const tool = await h.page.locator("[data-tool='mcp__talkide-issue-tracking__report_issue'] [data-testid=tool-name]").textContent();
      check(tool === "Issue tracking · report issue", `${name}: the tool's name shows as "${tool}"`);
      const foot = await footers(h).nth(1).textContent();
      check(!foot.includes("end_turn") && foot.includes("finished"), `${name}: the footer says "${foot}"`);

      // Markdown in a user message, sanitized; tables, quotes, code.
      const md = [
        "**bold** and `inline` <img src=x onerror=\"window.__pwned='user'\">",
        "",
        "| name | value |",
        "|---|---|",
        "| alpha | 1 |",
        "| beta | 2 |",
        "",
        "> a quoted line",
        "",
        "```js\n// a comment\nconst s = \"a string\"; let n = 42; function f() { return true; }\n```",
        "",
        "```python\ndef g(x):\n    return 'text' + str(3.5)  # note\n```",
        "",
        "```go\npackage main\nfunc main() { fmt.Println(\"hi\", 7) }\n```",
      ].join("\n");
      await send(h, md);
      await turnEnds(h, 3);
      const user = h.page.locator("[data-kind='user.message']").last();
      check((await user.locator("strong").count()) === 1 && (await user.locator("table").count()) === 1 && (await user.locator("blockquote").count()) === 1,
        `${name}: the user message is not rendered as Markdown`);
      check((await user.locator("img").count()) === 0 && (await user.textContent()).includes("<img src=x"), `${name}: raw HTML in a user message was not escaped`);
      check((await h.page.evaluate(() => window.__pwned)) === undefined, `${name}: a user message ran script`);
      const styles = await h.page.locator("[data-kind=text]").last().evaluate((r) => {
        const td = r.querySelector("td"), bq = r.querySelector("blockquote");
        return { td: td && parseFloat(getComputedStyle(td).borderTopWidth), bq: bq && parseFloat(getComputedStyle(bq).borderLeftWidth) };
      });
      check(styles.td >= 1 && styles.bq >= 3, `${name}: tables and quotes are not styled: ${JSON.stringify(styles)}`);
      const low = await h.page.evaluate(() => {
        const rgb = (c) => (c.match(/[\d.]+/g) || []).slice(0, 4).map(Number);
        const bg = (e) => {
          for (let p = e; p; p = p.parentElement) {
            const c = rgb(getComputedStyle(p).backgroundColor);
            if (c.length === 3 || (c.length === 4 && c[3] > 0)) return c.slice(0, 3);
          }
          return [255, 255, 255];
        };
        return [...document.querySelectorAll(".md pre [class^=hljs-], .md pre code")].map((e) => ({ cls: e.className, text: e.textContent.slice(0, 20), fg: rgb(getComputedStyle(e).color).slice(0, 3), bg: bg(e) }));
      });
      check(low.length > 10, `${name}: only ${low.length} highlighted spans`);
      const bad = low.map((x) => ({ ...x, ratio: contrast(x.fg, x.bg) })).filter((x) => x.ratio < 4.5);
      check(bad.length === 0, `${name}: highlighted code under 4.5:1: ${JSON.stringify(bad.slice(0, 5))}`);
      await noHorizontalOverflow(h, `${name}: Markdown, tables and code`);
      await h.screenshot(name + "-markdown");
      out[name] = id;
    }
    h.result(out);
  },

  // The simulator's notice once per conversation, not after every worker
  // restart (each restart writes it to the log again).
  async notice(h) {
    const id = await create(h);
    await send(h, "Before the restart.");
    await turnEnds(h, 1);
    await h.step("restart-worker");
    await send(h, "After the restart.");
    await turnEnds(h, 2, 60_000);
    const all = await h.page.locator("[data-kind=notice]").evaluateAll((els) => els.map((e) => ({ text: e.textContent, hidden: e.hidden })));
    const shown = all.filter((n) => !n.hidden);
    const texts = new Set(shown.map((n) => n.text));
    check(texts.size === shown.length, `the same notice shows ${shown.length} times: ${JSON.stringify(all)}`);
    check(all.length > shown.length, `the log holds no repeated notice (the test did not restart the worker?): ${JSON.stringify(all)}`);
    await h.page.reload();
    await turnEnds(h, 2);
    const again = await h.page.locator("[data-kind=notice]:not([hidden])").count();
    check(again === shown.length, `after a reload ${again} notices show, before ${shown.length}`);
    await h.screenshot("notice-once");
    h.result({ conversation: id, notices: all });
  },
};
