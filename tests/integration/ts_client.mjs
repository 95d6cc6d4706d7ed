// The TypeScript MCP client 2.x (@modelcontextprotocol/client, pinned by scripts/install-npm-servers.sh)
// against one URL, imported from the path given as argv[4]: connect (versionNegotiation from argv[3]: "pin" = { pin: '2026-07-28' }, "auto",
// "legacy"), list the tools, print one JSON line: {"ok": true, "tools": [...]} or
// {"ok": false, "stage": "connect"|"listTools", "message": ...}. Run by tests/integration/test_npm_ts_client.py.
import { pathToFileURL } from "node:url";

const [url, mode, clientModule] = process.argv.slice(2); // clientModule: the package's dist/index.mjs
const { Client, StreamableHTTPClientTransport } = await import(pathToFileURL(clientModule).href);
const negotiation = mode === "pin" ? { mode: { pin: "2026-07-28" } } : { mode };
const client = new Client({ name: "ts-client-test", version: "1" }, { versionNegotiation: negotiation });
let stage = "connect";
try {
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    stage = "listTools";
    const { tools } = await client.listTools();
    console.log(JSON.stringify({ ok: true, tools: tools.map((t) => t.name) }));
} catch (error) {
    console.log(JSON.stringify({ ok: false, stage, message: String(error?.message ?? error) }));
} finally {
    await client.close().catch(() => {});
}
