// A TypeScript SDK 1.x client (the npm tier's) that calls one tool with progress and prints, one
// JSON line each: every progress notification, then the result (or the error), then "done".
// Usage: node resuming_client.mjs SDK_DIR URL TOOL ARGS_JSON [VERSION]
// The SDK's StreamableHTTPClientTransport resumes a cut stream with Last-Event-ID by itself.
import { pathToFileURL } from "node:url";
import path from "node:path";

const [sdkDir, url, tool, argsJson] = process.argv.slice(2);
const load = (p) => import(pathToFileURL(path.join(sdkDir, "dist/esm", p)).href);
const { Client } = await load("client/index.js");
const { StreamableHTTPClientTransport } = await load("client/streamableHttp.js");

const print = (value) => process.stdout.write(JSON.stringify(value) + "\n");
const client = new Client({ name: "resuming-client", version: "1" });
const transport = new StreamableHTTPClientTransport(new URL(url), {
  reconnectionOptions: { initialReconnectionDelay: 100, maxReconnectionDelay: 1000, reconnectionDelayGrowFactor: 1.5, maxRetries: 5 },
});
transport.onerror = (error) => process.stderr.write(`transport: ${error}\n`);
try {
  await client.connect(transport);
  print({ protocolVersion: transport.protocolVersion ?? null });
  const result = await client.callTool({ name: tool, arguments: JSON.parse(argsJson) }, undefined, {
    onprogress: (progress) => print({ progress: progress.progress }),
    timeout: 60000,
    resetTimeoutOnProgress: true,
  });
  print({ result });
} catch (error) {
  print({ error: String(error) });
}
print("done");
await client.close();
process.exit(0);
