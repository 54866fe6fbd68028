// Attachments (cmd/talkide browser_attach_test.go): a text file and a PNG
// chosen with the paperclip's file input become chips, go with the
// message, show as chips in the user's bubble, the simulated model's
// reply says it saw the image, and the files are in the Files panel
// under attachments/; a name with a leading dot is mended, the same name
// twice gets a suffix. A file over the limit is refused with a reason
// before anything is uploaded; an upload the server refuses for want of
// room is sent again after its Retry-After. At a laptop's size and a
// phone's.
import { mkdtempSync, rmSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { T, DESKTOP, PHONE, check, create, turnEnds } from "./daily.mjs";

// A 1×1 PNG.
const PNG = Buffer.from("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==", "base64");

export const attach = {
  async attach(h) {
    // The file over the limit is a sparse file on disk, which the browser
    // gets by its path; as a buffer it crossed the protocol as 13 MB of
    // base64 (a setInputFiles of this scenario once ran past its 30 s on a
    // loaded machine).
    const dir = mkdtempSync(join(tmpdir(), "talkide-attach-"));
    const huge = join(dir, "huge.log");
    writeFileSync(huge, "");
    truncateSync(huge, 10 * 1024 * 1024 + 1);
    try {
      await attachAtEachSize(h, huge);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
};

async function attachAtEachSize(h, huge) {
  for (const [size, vp] of [["desktop", DESKTOP], ["phone", PHONE]]) {
    await h.page.setViewportSize(vp);
    await create(h, "attachments " + size);
    const input = h.page.getByTestId("attach-input");
    const chips = h.page.getByTestId("chip");

    // Over the limit: refused with the reason, nothing added.
    await input.setInputFiles(huge);
    await h.page.getByTestId("attach-error").waitFor({ timeout: T });
    check((await h.page.getByTestId("attach-error").textContent()).includes("huge.log"), "the refusal does not name the file");
    check((await chips.count()) === 0, "a file over the limit became a chip");

    // A text file and an image; on the phone the text file twice, which
    // lands under a second name.
    const files = [
      { name: "build.log", mimeType: "text/plain", buffer: Buffer.from("error: it broke\n") },
      { name: "pixel.png", mimeType: "image/png", buffer: PNG },
    ];
    // A name the server would refuse (a leading dot) is mended, not refused.
    if (size === "desktop") files.push({ name: ".secret notes.txt", mimeType: "text/plain", buffer: Buffer.from("n\n") });
    if (size === "phone") files.push(files[0]);
    await input.setInputFiles(files);
    await chips.nth(files.length - 1).waitFor({ timeout: T });
    check((await chips.count()) === files.length, `${await chips.count()} chips for ${files.length} files`);
    check((await chips.nth(1).textContent()).includes("pixel.png") && (await chips.nth(1).textContent()).includes("70 B"), "the image's chip: " + (await chips.nth(1).textContent()));
    await h.screenshot("chips-" + size);

    // On the desktop the first upload is refused for want of room, as a
    // busy control-plane refuses it (503 too_many_uploads, Retry-After):
    // the page sends it again after the wait, and the message goes whole.
    let refused = 0;
    const uploads = (u) => u.pathname.endsWith("/attachments");
    if (size === "desktop") {
      await h.page.route(uploads, async (route) => {
        if (refused > 0) return route.continue();
        refused++;
        await route.fulfill({
          status: 503,
          headers: { "Retry-After": "1", "Content-Type": "application/json" },
          body: JSON.stringify({ error: { code: "too_many_uploads", message: "the server holds as many uploaded bytes as it may at once (64 MiB): send this again in a moment" } }),
        });
      });
    }
    const box = h.page.getByTestId("composer");
    await box.fill("What went wrong?");
    await box.press("Enter");
    await turnEnds(h, 1, 60_000);
    if (size === "desktop") {
      await h.page.unroute(uploads);
      check(refused === 1, `the upload was refused ${refused} times, want once`);
    }
    check((await chips.count()) === 0, "the chips stayed in the composer after sending");

    const bubble = h.page.locator("[data-kind='user.message']").last();
    const sent = await bubble.getByTestId("bubble-chip").allTextContents();
    const want = ["build.log", "pixel.png"].concat(size === "phone" ? ["build (2).log"] : ["secret notes.txt"]);
    check(sent.length === want.length && want.every((n, i) => sent[i].includes(n)), "the bubble's chips: " + JSON.stringify(sent));
    check((await bubble.textContent()).includes("What went wrong?"), "the bubble lost the text");
    check(!(await bubble.textContent()).includes("Attached:"), "the bubble shows the raw Attached lines");
    const reply = await h.page.locator("[data-kind=text]").last().textContent();
    check(reply.includes("saw 1 image (image/png, 70 bytes)"), "the reply does not show the model saw the image: " + reply);
    check(reply.includes("Attached: attachments/build.log (16 B)"), "the text sent does not name the file: " + reply);
    await h.screenshot("sent-" + size);

    // The files, in the Files panel.
    if (size === "phone") {
      await h.page.getByTestId("menu").click();
      await h.page.getByTestId("drawer-close").waitFor({ timeout: T });
    }
    await h.page.getByTestId("files-tab").click();
    await h.page.locator("[data-testid=tree-dir]").filter({ hasText: "attachments/" }).click();
    for (const n of want) {
      await h.page.locator(`li[data-path="attachments/${n}"] [data-testid=tree-file]`).waitFor({ timeout: T });
    }
    await h.screenshot("files-" + size);
    if (size === "phone") await h.page.getByTestId("drawer-close").click();
  }
}
