// A minimal receiver of tabd's webhooks, in Node's standard library alone.
//
//     TABD_WEBHOOK_SECRET_FILE=webhook.secret node receiver.mjs 9000
//
// It checks each request as Standard Webhooks say (an HMAC-SHA256 of "id.timestamp.body"
// with the secret, base64, in `webhook-signature` as `v1,…`; a `webhook-timestamp` within five
// minutes of now), answers 401 to one that fails, skips a `webhook-id` it has seen already
// (tabd delivers at least once: a retry or a restart can post an event again), and prints
// each new event as one line of JSON, then answers 204. Without a secret file it checks
// nothing. A real back end would store `webhook-id`s with its own data, in one transaction.
import { createHmac, timingSafeEqual } from "node:crypto";
import { readFileSync } from "node:fs";
import { createServer } from "node:http";

const TOLERANCE = 300; // seconds between webhook-timestamp and now

/** The secrets of tabd's --webhook-secret-file: one per line (two during a rotation),
 * `whsec_` and base64, or the line's own bytes. */
export function loadSecrets(path) {
  return readFileSync(path, "utf8").split("\n").map((l) => l.trim()).filter((l) => l && !l.startsWith("#"))
    .map((l) => (l.startsWith("whsec_") ? Buffer.from(l.slice(6), "base64") : Buffer.from(l, "utf8")));
}

/** Why the request is refused, or null when it is tabd's. */
export function refusal(headers, body, secrets, now = Date.now() / 1000) {
  const id = headers["webhook-id"], stamp = headers["webhook-timestamp"], signature = headers["webhook-signature"];
  if (!id || !stamp || !signature) return "a header is missing";
  const seconds = Number.parseInt(stamp, 10);
  if (!/^\d+$/.test(stamp)) return "webhook-timestamp is not a number";
  if (Math.abs(now - seconds) > TOLERANCE) return "webhook-timestamp is too far from now";
  const content = Buffer.concat([Buffer.from(`${id}.${seconds}.`), body]);
  const expected = secrets.map((s) => Buffer.from(createHmac("sha256", s).update(content).digest("base64")));
  const given = signature.split(" ").filter((p) => p.startsWith("v1,")).map((p) => Buffer.from(p.slice(3)));
  const match = expected.some((e) => given.some((g) => g.length === e.length && timingSafeEqual(e, g)));
  return match ? null : "no signature matches";
}

const port = Number(process.argv[2] ?? 9000);
const secrets = process.env.TABD_WEBHOOK_SECRET_FILE ? loadSecrets(process.env.TABD_WEBHOOK_SECRET_FILE) : null;
const seen = new Set();

const server = createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const body = Buffer.concat(chunks);
    if (secrets) {
      const why = refusal(req.headers, body, secrets);
      if (why) {
        console.error(JSON.stringify({ refused: why }));
        res.writeHead(401).end();
        return;
      }
    }
    const id = req.headers["webhook-id"];
    if (!seen.has(id)) { // a duplicate is answered, not handled twice
      seen.add(id);
      console.log(JSON.stringify({ id, event: JSON.parse(body.toString("utf8")) }));
    }
    res.writeHead(204).end();
  });
});
server.listen(port, "127.0.0.1", () => console.log(JSON.stringify({ listening: server.address().port })));
