// Scenarios for finding a conversation (cmd/talkide browser_find_test.go):
// the title the control-plane gives a new conversation after its first
// message, the list ordered by last activity, and Ctrl+K searching the text
// of replies. Merged into scenarios.mjs's map.

import { T, DESKTOP, PHONE, check, create, send, turnEnds } from "./daily.mjs";

/** firstInList waits for conversation id to head the list. */
async function firstInList(h, id, what) {
  const ok = await h.page.waitForFunction(
    (id) => document.querySelector(".sidebar li[data-conversation]")?.getAttribute("data-conversation") === id,
    id,
    { timeout: T },
  ).then(() => true, () => false);
  if (!ok) {
    const order = await h.page.locator(".sidebar li[data-conversation]").evaluateAll((ls) => ls.map((l) => l.dataset.conversation));
    throw new Error(`${what}: ${id} is not first in the list: ${order.join(", ")}`);
  }
}

/** searchFor opens Ctrl+K, types q and waits for conversation id among the
 * hits the search endpoint answered (data-searched is the query it answered). */
async function searchFor(h, q, id) {
  await h.page.keyboard.press("Control+k");
  const input = h.page.getByTestId("switcher-input");
  await input.waitFor({ timeout: T });
  await input.pressSequentially(q, { delay: 20 });
  await h.page.locator(`[data-testid=switcher-hits][data-searched="${q}"]`).waitFor({ timeout: T });
  const hit = h.page.locator(`[data-testid=switcher-hit][data-conversation="${id}"]`);
  await hit.waitFor({ timeout: T });
  return hit;
}

export const find = {
  async find(h) {
    await h.page.setViewportSize(DESKTOP);

    // A new conversation is untitled until its first message names it;
    // the title shows in the list without a reload.
    const a = await create(h);
    const rowA = h.page.locator(`.sidebar li[data-conversation="${a}"]`);
    check((await rowA.getByTestId("conversation-title").getAttribute("data-untitled")) === "1", "a new conversation is not marked untitled");
    check((await rowA.getByTestId("conversation-title").textContent()) === "New conversation", "a new conversation shows its id");
    await send(h, "Plan the zebra migration for the billing service");
    await turnEnds(h, 1);
    const titleA = rowA.locator("[data-testid=conversation-title]:not([data-untitled])");
    await titleA.waitFor({ timeout: T });
    const named = await titleA.textContent();
    check(named.includes("Plan the zebra migration"), `the generated title is "${named}"`);
    await h.page.waitForFunction((t) => document.title.startsWith(t), named, { timeout: T });

    // Another conversation whose reply (not its message) holds a word:
    // the simulator quotes the tool's output, wombat42, in its reply.
    const b = await create(h, "Marsupials");
    await send(h, '[[tool:Bash {"command":"echo wombat$((6*7))"}]]');
    await turnEnds(h, 1);
    await h.page.getByTestId("transcript").getByText("tool results: 1) wombat42").waitFor({ timeout: T });
    await firstInList(h, b, "after b's turn");

    // A message in the older conversation moves it to the top.
    await h.page.locator(`.sidebar li[data-conversation="${a}"] a`).click();
    await h.page.locator("[data-testid=conn][data-state=live]").waitFor({ timeout: T });
    await send(h, "And the rollback plan?");
    await firstInList(h, a, "after a message in a");
    await turnEnds(h, 2);
    await firstInList(h, a, "after a's second turn");
    const order = await h.page.locator(".sidebar li[data-conversation]").evaluateAll((ls) => ls.map((l) => l.dataset.conversation));
    check(order.indexOf(a) < order.indexOf(b), `the list is not by activity: ${order.join(", ")}`);

    // Ctrl+K finds the word of b's reply, with a snippet that marks it,
    // and opens b.
    const hit = await searchFor(h, "wombat42", b);
    check((await hit.getAttribute("data-kind")) === "assistant", `the hit matched ${await hit.getAttribute("data-kind")}, want the reply`);
    const snippet = await hit.getByTestId("snippet").textContent();
    check(snippet.includes("wombat42"), `the snippet is "${snippet}"`);
    check((await hit.locator("mark").first().textContent()).toLowerCase().startsWith("wombat42"), "the snippet does not mark the word");
    await h.screenshot("search");
    await h.page.getByTestId("switcher-input").press("Enter");
    await h.page.waitForURL((u) => u.pathname === "/c/" + b, { timeout: T });

    // On a phone the switcher searches the same way and fits the window.
    await h.page.setViewportSize(PHONE);
    const phoneHit = await searchFor(h, "zebra migr", a);
    const box = await h.page.getByTestId("switcher").boundingBox();
    check(box && box.x >= 0 && box.x + box.width <= PHONE.width + 1, `the switcher is outside the phone's window: ${JSON.stringify(box)}`);
    check((await phoneHit.textContent()).includes("zebra"), "the phone's hit does not name the conversation");
    await h.screenshot("search-phone");
    await h.page.keyboard.press("Escape");
    h.result({ a, b, title: named, order });
  },
};
