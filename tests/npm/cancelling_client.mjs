// A TypeScript SDK client (1.x, or the 2.x client package with "v2") that starts a long call
// with progress and cancels it at its first progress (an AbortController: the SDK POSTs
// notifications/cancelled). It prints one JSON line each: the first call's rejection
// ("cancelled"); after a line on stdin (the test saw the SDK resume the cancelled stream), a
// second call's result; "ready"; and after another line, "done" once closed. Every error the
// client or its transport reports is printed as it comes ({"error": …}: the SDK's "Received a
// response for an unknown message ID" among them).
// Usage: node cancelling_client.mjs SDK_DIR URL [v2]
import { pathToFileURL } from "node:url";
import path from "node:path";
import readline from "node:readline";

const [sdkDir, url, flavour] = process.argv.slice(2);
let Client, StreamableHTTPClientTransport;
if (flavour === "v2") {
  ({ Client, StreamableHTTPClientTransport } = await import(pathToFileURL(path.join(sdkDir, "dist/index.mjs")).href));
} else {
  const load = (p) => import(pathToFileURL(path.join(sdkDir, "dist/esm", p)).href);
  ({ Client } = await load("client/index.js"));
  ({ StreamableHTTPClientTransport } = await load("client/streamableHttp.js"));
}

// The 1.x Client takes (params, resultSchema, options); the 2.x one (params, options).
const callTool = (params, options) =>
  flavour === "v2" ? client.callTool(params, options) : client.callTool(params, undefined, options);
const print = (value) => process.stdout.write(JSON.stringify(value) + "\n");
const client = new Client({ name: "cancelling-client", version: "1" });
const transport = new StreamableHTTPClientTransport(new URL(url)); // the SDK's own reconnection options
client.onerror = (error) => print({ error: String(error) });
const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const nextLine = () => lines.next();
try {
  await client.connect(transport);
  print({ protocolVersion: transport.protocolVersion ?? null, session: transport.sessionId ?? null });
  const controller = new AbortController();
  let progressed;
  const firstProgress = new Promise((resolve) => (progressed = resolve));
  const call = callTool({ name: "countdown", arguments: { steps: 100, interval_ms: 200 } }, {
    signal: controller.signal,
    onprogress: () => progressed(),
    timeout: 60000,
  });
  await firstProgress;
  controller.abort("the user cancelled");
  try {
    await call;
    print({ unexpected: "the cancelled call answered" });
  } catch (error) {
    print({ cancelled: String(error) });
  }
  await nextLine();
  const result = await callTool({ name: "countdown", arguments: { steps: 5, interval_ms: 500 } });
  print({ result });
} catch (error) {
  print({ failed: String(error) });
}
print("ready");
await nextLine();
await client.close();
print("done");
process.exit(0);
