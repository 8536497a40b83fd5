// docs_example.ts holds docs/api.md's TypeScript examples ("Clients"), so
// the compiler checks them with the live test; nothing runs them.
import { MakerAPIError, MakerClient, verifyWebhook } from "../src/index.js";

// keyFromEnv is the API key, from the environment, never from the code.
function keyFromEnv(): string {
  return process.env.MAKER_API_KEY ?? "";
}

export async function example(): Promise<void> {
  const c = new MakerClient({ baseUrl: "http://127.0.0.1:8080", apiKey: keyFromEnv() });
  const job = await c.submitJob({ task: "hanoi", params: { disks: 10 }, k: 3, job_id: "h10" });
  for await (const ev of c.events(job.id)) {
    if (ev.event === "status") console.log(ev.data.state, ev.data.progress);
    else if (ev.event === "report") console.log("solved:", ev.data.solved);
  }
  const report = await c.waitForResult("h10"); // the same report, once finished
  console.log(report.steps);

  const batch = await c.createBatch([
    { custom_id: "a", task: "hanoi", params: { disks: 4 }, k: 1 },
    { custom_id: "b", task: "hanoi", params: { disks: 5 }, k: 1 },
  ]);
  await c.waitForBatch(batch.id);
  for (const line of await c.batchOutput(batch.id)) console.log(line.custom_id, line.response?.solved ?? line.error);

  try {
    await c.pause("no-such-job");
  } catch (e) {
    if (e instanceof MakerAPIError && e.kind === "not-found") console.log(e.status, e.detail); // 404 no such job
  }
}

export async function webhook(
  c: MakerClient,
  req: { headers: Record<string, string | string[] | undefined> },
  rawBody: string,
): Promise<unknown> {
  // Once, with the tenant's key (c above): the secret its deliveries are signed with.
  const { secret } = await c.getWebhookSecret();
  // In a handler given the raw body: throws unless signed with the secret, within 5 minutes.
  const event = await verifyWebhook(secret, req.headers, rawBody);
  // Where each delivery stands: pending, delivered or failed, and every attempt.
  for (const d of await c.listWebhookDeliveries({ limit: 20 })) console.log(d.id, d.state, d.attempts?.length);
  return event;
}
