// The TypeScript MCP client 2.x (@modelcontextprotocol/client, pinned by scripts/install-npm-servers.sh)
// against one URL, imported from the path given as argv[4]: connect (versionNegotiation from argv[3]: "pin" = { pin: '2026-07-28' }, "auto",
// "legacy"), list the tools, call argv[5] with the JSON arguments argv[6] when given, print one JSON line:
// {"ok": true, "tools": [...], "called": [texts]} or {"ok": false, "stage": "connect"|"listTools"|"callTool",
// "message": ...}. Run by tests/integration/test_npm_ts_client.py and test_npm_warm_pool.py.
import { pathToFileURL } from "node:url";

const [url, mode, clientModule, tool, args] = process.argv.slice(2); // clientModule: the package's dist/index.mjs
const { Client, StreamableHTTPClientTransport } = await import(pathToFileURL(clientModule).href);
const negotiation = mode === "pin" ? { mode: { pin: "2026-07-28" } } : { mode };
const client = new Client({ name: "ts-client-test", version: "1" }, { versionNegotiation: negotiation });
let stage = "connect";
try {
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    stage = "listTools";
    const { tools } = await client.listTools();
    let called;
    if (tool) {
        stage = "callTool";
        const result = await client.callTool({ name: tool, arguments: JSON.parse(args ?? "{}") });
        called = result.content.filter((c) => c.type === "text").map((c) => c.text);
    }
    console.log(JSON.stringify({ ok: true, tools: tools.map((t) => t.name), called }));
} catch (error) {
    console.log(JSON.stringify({ ok: false, stage, message: String(error?.message ?? error) }));
} finally {
    await client.close().catch(() => {});
}
